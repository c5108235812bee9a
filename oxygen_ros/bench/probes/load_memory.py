"""``python -m oxygen_ros.bench.probes.load_memory CHECKPOINT``: load a checkpoint and report its peak memory (JSON).

Host peak: the growth of this process's resident-set high-water mark over the load (reset through
/proc/self/clear_refs just before it), against the bytes of the loaded weights. torch's one-time lazy imports
for meta tensors happen before it and are reported apart (``lazy_import_bytes``). On CUDA the device
allocator's peak is reported too; the host peak then shows that no full host copy was made.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from oxygen_ros.model.checkpoints.checkpoint import load_checkpoint
from oxygen_ros.model.network.config import TINY
from oxygen_ros.model.network.vla import Pi05Model

from oxygen_ros.bench.memory import status_kib


def _warm_meta_device() -> int:
    """Building a model on the meta device imports torch's meta-kernel modules once per process (about 75 MB
    of Python objects, whatever the model's size); do it before the measurement and say how much it was."""
    before = status_kib("VmRSS")
    with torch.device("meta"):
        Pi05Model(TINY)
    return (status_kib("VmRSS") - before) * 1024


def measure(checkpoint: str, dtype: str, device: str) -> dict:
    lazy_imports = _warm_meta_device()
    baseline = status_kib("VmRSS") * 1024
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
    t0 = time.perf_counter()
    loaded = load_checkpoint(checkpoint, dtype=dtype, device=device)
    seconds = time.perf_counter() - t0
    host_peak = status_kib("VmHWM") * 1024 - baseline
    tensors = [*loaded.model.parameters(), *loaded.model.buffers()]
    weights = sum(t.numel() * t.element_size() for t in tensors)
    result = {
        "weights_bytes": weights,
        "host_peak_bytes": host_peak,
        "host_peak_over_weights": host_peak / weights,
        "seconds": seconds,
        "lazy_import_bytes": lazy_imports,
        "dtype": dtype,
        "device": device,
    }
    if torch.device(device).type == "cuda":
        result["device_peak_bytes"] = int(torch.cuda.max_memory_allocated(device))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oxygen_ros.bench.probes.load_memory", description=__doc__)
    parser.add_argument("checkpoint")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    json.dump(measure(args.checkpoint, args.dtype, args.device), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
