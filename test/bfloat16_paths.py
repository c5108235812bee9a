"""What a bfloat16 runtime does on the CPU it runs on: the path chosen, the line saying so, and its output
against float32's. Imported by test_cpu_bfloat16.py for this CPU, and run as a script in a process whose CPU
is held to AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``), where it prints the same record as JSON.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import torch

from oxygen_ros.model.network.cpu_bfloat16 import onednn_bfloat16_refusal, resolve_dtype
from oxygen_ros.model.network.packed_decode import can_pack
from oxygen_ros.runtime import PolicyRuntime, RuntimeConfig

STEPS = 4  # decode steps after the tick


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run(dtype: str) -> tuple[np.ndarray, list[int], PolicyRuntime, list[str]]:
    """One tick and a few decode steps of the tiny preset in ``dtype``: (actions, tokens, runtime, log lines)."""
    handler = _Lines()
    logger = logging.getLogger("oxygen_ros")
    logger.addHandler(handler)
    before = logger.level
    logger.setLevel(logging.INFO)
    try:
        config = RuntimeConfig(model_preset="tiny", dtype=dtype, kv_budget_mb=16.0, num_threads=1, prompt_format="oxygen",
                               tokens_per_frame=1, seed=3)
        runtime = PolicyRuntime.load(config)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)
    s = runtime.image_size
    image = np.random.default_rng(0).integers(0, 255, (s, s, 3), dtype=np.uint8)
    actions = runtime.step(runtime.make_frame([image], None, "pick the cube", stamp_ns=1)).actions
    for _ in range(STEPS):
        runtime.decode()
    tokens = [t for r in runtime.engine.kv.running() for t in r.generated]
    return actions, tokens, runtime, handler.lines


def record() -> dict:
    f32, _, _, _ = run("float32")
    bf16, tokens, runtime, lines = run("bfloat16")
    _, _, auto, auto_lines = run("auto")
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "refusal": onednn_bfloat16_refusal(),
        "can_pack": can_pack(torch.zeros(1, dtype=torch.bfloat16)),
        "auto": resolve_dtype("auto", "cpu"),
        "auto_runtime_dtype": auto.dtype,
        "auto_lines": [line for line in auto_lines if line.startswith("dtype ")],
        "bfloat16_runtime_dtype": runtime.dtype,
        "packed_bytes": runtime.engine.packed_decode_bytes,
        "lines": [line for line in lines if line.startswith("dtype ")],
        "tokens": len(tokens),
        "finite": bool(np.isfinite(bf16).all()),
        "max_abs_diff": float(np.abs(bf16 - f32).max()),
        "max_abs": float(np.abs(f32).max()),
    }


if __name__ == "__main__":
    print(json.dumps(record()))
