"""Peak memory of one benchmark configuration.

CUDA: the allocator's own peak. CPU: the process's resident-set high-water mark, reset through
/proc/self/clear_refs before the configuration and read from /proc/self/status after it, minus the
resident size before the model was built (so the figure is weights + KV pool + activations).
"""

from __future__ import annotations

from pathlib import Path

import torch


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


class PeakMemory:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.baseline = 0 if device.type == "cuda" else status_kib("VmRSS") * 1024

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS

    def peak_bytes(self) -> int:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return int(torch.cuda.max_memory_allocated(self.device))
        return status_kib("VmHWM") * 1024 - self.baseline
