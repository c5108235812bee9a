"""What the benchmark ran on, recorded next to its figures: CPU model, cores, caches, load, torch, threads, GPU."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from oxygen_ros.engine.cpu_caches import cpu_caches
from oxygen_ros.model.network.cpu_bfloat16 import cpu_flags

# The instruction-set features that decide the matrix products' speed and the dtype `auto` picks (bfloat16
# runs natively only with AVX512-BF16 or AMX): the same code differs several-fold between such CPUs.
MATRIX_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info(device: str, lane_threads: int | None) -> dict:
    """The record stored in results.json (no paths, no host names)."""
    info = {
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_caches": cpu_caches(),
        "cpu_features": [f for f in MATRIX_FEATURES if f in cpu_flags()],
        "arch": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "lane_threads": lane_threads,
        "load_average_at_start": load_average(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        info["gpu"] = {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                       "capability": f"{props.major}.{props.minor}", "cuda": torch.version.cuda}
    return info


def describe(info: dict) -> str:
    """One line for the printed header."""
    caches = " ".join(f"L{c['level']}{c['type'][0] if c['type'] != 'Unified' else ''} {c['size']}"
                      for c in info["cpu_caches"])
    features = " ".join(info.get("cpu_features") or []) or "none of " + "/".join(MATRIX_FEATURES)
    line = (f"{info['cpu_model']}, {info['cpu_cores']} cores ({caches or 'caches unknown'}; {features}), "
            f"torch {info['torch']}, {info['torch_threads']} threads")
    if info.get("lane_threads"):
        line += f" (lanes: {info['lane_threads']} each)"
    if info.get("gpu"):
        line += f", GPU {info['gpu']['name']}"
    if info.get("load_average_at_start"):
        line += f", load average {info['load_average_at_start'][0]:.1f}"
    return line
