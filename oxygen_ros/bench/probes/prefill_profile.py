"""Where one prefill's time goes: the device's busy time against the wall, and both against the floor of its
matrix products.

``python -m oxygen_ros.bench.probes.prefill_profile --preset pi05 --device cuda`` builds the benchmark's model and
frame (``bench.workload``), then for the eager and the compiled prefill prints the median wall time, the
kernels' summed time and count from ``torch.profiler`` (a GPU is busy for that long; the rest of the wall is
the host launching), and the matrix-product floor: the prefill's multiply-adds (weights × positions, plus the
attention's scores and sums) at a given rate (``--tflops``, default 790: a bf16 matrix product measured on an
H200). On a CPU the profiler sees no device kernels: the figures are the wall times and the floor.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from oxygen_ros.model.backends.compiled_prefill import make_prefiller
from oxygen_ros.model.network.vla import Pi05Model

from oxygen_ros.bench.workload import Workload


def matmul_flops(model: Pi05Model, image_tokens: int, text_tokens: int) -> float:
    """Floating-point operations of the prefill's matrix products: 2 per weight and position through the vision
    tower (its image tokens) and the backbone's half of every layer (all prefix positions), plus attention's
    QK^T and PV (each image's patches among themselves in the vision tower; the whole prefix in the backbone,
    an upper bound where the text is causal)."""
    cfg, b = model.config, model.config.backbone
    t = image_tokens + text_tokens
    vision = sum(p.numel() for p in model.vision_tower.parameters() if p.dim() == 2)
    backbone = sum(p.numel() for layer in model.layers for p in layer.vlm.parameters() if p.dim() == 2)
    v_attn = 4 * cfg.vision.depth * image_tokens * cfg.tokens_per_image * cfg.vision.width
    b_attn = 4 * b.depth * t * t * b.num_heads * b.head_dim
    return 2.0 * (vision * image_tokens + backbone * t) + v_attn + b_attn


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(prefill, args: tuple, device: torch.device, calls: int) -> dict:  # noqa: ANN001
    for _ in range(3):
        prefill(*args)
    _sync(device)
    walls = []
    for _ in range(calls):
        t0 = time.perf_counter()
        prefill(*args)
        _sync(device)
        walls.append(time.perf_counter() - t0)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(calls):
            prefill(*args)
        _sync(device)
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    return {"wall_ms": 1e3 * statistics.median(walls),
            "device_busy_ms": sum(e.device_time for e in kernels) / 1e3 / calls if kernels else None,
            "kernels": len(kernels) // calls if kernels else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oxygen_ros.bench.probes.prefill_profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="pi05")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--tflops", type=float, default=790.0, help="matrix-product rate of the floor, TFLOP/s")
    args = parser.parse_args(argv)
    workload = Workload(args.preset, args.device, args.dtype)
    model = workload.build_model()
    frame = workload.frames(model.config)[0]
    cfg, b = model.config, model.config.backbone
    k = torch.zeros(b.depth, cfg.max_prefix_tokens, b.num_kv_heads, b.head_dim, dtype=model.dtype, device=model.device)
    inputs = (frame.images, frame.image_mask, frame.prompt_tokens, k, torch.zeros_like(k))
    out = model.prefill(*inputs)
    flops = matmul_flops(model, out.num_image_tokens, out.length - out.num_image_tokens)
    floor_ms = 1e3 * flops / (args.tflops * 1e12)
    print(f"prefill profile: preset {args.preset}, {args.device}, {args.dtype}, {out.length} positions "
          f"({out.num_image_tokens} image), {flops / 1e12:.2f} TFLOP of matrix products = {floor_ms:.2f} ms at "
          f"{args.tflops:.0f} TFLOP/s")
    for name in ("eager", "compiled"):
        r = measure(make_prefiller(model, name, print), inputs, model.device, args.calls)
        busy = r["device_busy_ms"]
        detail = (f", device busy {busy:.1f} ms ({busy / r['wall_ms']:.0%} of the wall) in {r['kernels']} kernels, "
                  f"floor {floor_ms / busy:.0%} of busy" if busy else "")
        print(f"  {name:>8}: wall {r['wall_ms']:.1f} ms{detail}, floor {floor_ms / r['wall_ms']:.0%} of the wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
