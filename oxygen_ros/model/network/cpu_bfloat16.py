"""What bfloat16 can run on this CPU, asked of torch and oneDNN themselves, and the dtype ``auto`` picks.

Three CPU kinds behave differently:

* AVX512-BF16 or AMX: oneDNN multiplies bfloat16 natively and packs bfloat16 weights (the decode step's packed
  copies, ``packed_decode.py``); bfloat16 is the faster dtype there.
* AVX-512 (BW/VL/DQ) without BF16, or AVX-NE-CONVERT: oneDNN packs bfloat16 weights but converts to float32
  for every product; ``auto`` keeps float32.
* AVX2 only: oneDNN has no bfloat16 path at all (``mkldnn._reorder_linear_weight`` raises "bf16 path needs the
  cpu support avx_ne_convert or avx512bw, avx512vl and avx512dq"); torch's own bfloat16 kernels still run, but
  the bench preset's prefill, chunk and decode step take 3-6.5x their float32 time (docs/performance.md,
  "bfloat16 or float32 on each CPU kind"), so ``auto`` takes float32 and an explicit bfloat16 runs plain
  bfloat16 products with one warning saying so.

The probe is a real pack and product of a tiny weight, so it follows what this torch build and its oneDNN
allow on this processor, including the caps ``ONEDNN_MAX_CPU_ISA`` and ``ATEN_CPU_CAPABILITY`` put on them
(test/test_cpu_bfloat16.py runs the AVX2 path that way on any x86 CPU).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

# The CPU flags under which bfloat16 products run natively (a dot-product instruction, not a conversion).
NATIVE_BFLOAT16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.cache
def onednn_bfloat16_refusal() -> str | None:
    """None where oneDNN packs a bfloat16 weight and multiplies by it on this CPU; else why it does not (asked
    once per process: one pack and one product of an 8 x 8 weight)."""
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN"
    weight = torch.ones(8, 8, dtype=torch.bfloat16)
    x = torch.ones(2, 8, dtype=torch.bfloat16)
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight)
        out = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    except RuntimeError as exc:  # the CPU (or an ISA cap) lacks oneDNN's bfloat16 instructions
        return f"oneDNN has no bfloat16 path on this CPU ({str(exc).splitlines()[0]})"
    if not torch.equal(out, torch.full((2, 8), 8.0, dtype=torch.bfloat16)):
        return "oneDNN's packed bfloat16 product gave a wrong result on this CPU"
    return None


def onednn_packs_bfloat16() -> bool:
    return onednn_bfloat16_refusal() is None


def plain_bfloat16(dtype: str) -> bool:
    """A bfloat16 model on a CPU without oneDNN's bfloat16 path: torch's own, slower, bfloat16 kernels."""
    return dtype == "bfloat16" and onednn_bfloat16_refusal() is not None


def native_bfloat16_cpu() -> bool:
    """bfloat16 products run natively: oneDNN has its bfloat16 path and the CPU a bfloat16 dot product."""
    return onednn_packs_bfloat16() and bool(NATIVE_BFLOAT16_FLAGS & cpu_flags())


def isa_summary() -> str:
    """The instruction sets the products use: ATen's kernels' and the CPU's bfloat16 flags."""
    native = sorted(NATIVE_BFLOAT16_FLAGS & cpu_flags())
    return f"ATen {torch.backends.cpu.get_cpu_capability()}, CPU {' '.join(native) or 'no avx512_bf16/amx_bf16'}"


def resolve_dtype(name: str, device: str | torch.device) -> str:
    """``auto`` → bfloat16 on CUDA and on a CPU that runs it natively, float32 elsewhere; others as given."""
    if name != "auto":
        return name
    if torch.device(device).type == "cuda":
        return "bfloat16"
    return "bfloat16" if native_bfloat16_cpu() else "float32"


def cpu_dtype_line(requested: str, dtype: str) -> str:
    """The one line saying which products a CPU model runs and why (``requested`` as configured, ``dtype`` as
    resolved)."""
    why = onednn_bfloat16_refusal()
    if dtype == "float32":
        if requested == "auto":
            reason = why or "the CPU converts bfloat16 to float32 for every product (no avx512_bf16/amx_bf16)"
            return f"dtype auto: float32 ({isa_summary()}): {reason}; float32 is the faster dtype here"
        return f"dtype float32 ({isa_summary()})"
    if why is None:
        native = "native" if native_bfloat16_cpu() else "converted to float32 in each product"
        return (f"dtype {requested}: bfloat16 products in oneDNN, {native} ({isa_summary()}); decode weights "
                f"packed as pack_decode_weights says")
    return (f"dtype bfloat16: plain bfloat16 products in torch's own kernels, nothing packed ({isa_summary()}): "
            f"{why}; bfloat16 takes 3-6.5x float32's time on such a CPU (dtype auto picks float32)")
