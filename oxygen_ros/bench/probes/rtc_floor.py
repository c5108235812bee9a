"""How close a real-time-chunking chunk is to its floor: A_rtc against the plain chunk A, and the same ratio
for their matrix products alone.

Exact ΠGDM guidance needs, at every Euler step, the network's forward and one vector-Jacobian product with
respect to x_t (``model.rtc``). The backward of a linear layer with respect to its input is one product of
the forward's size (grad_in = grad_out · W); no weight gradient is needed, and none is formed when the
weights do not require grad. So the guided chunk's products are the plain chunk's plus about as many again
(plus attention's backward): that ratio, replayed on fresh tensors of the recorded shapes, is the floor of
A_rtc ÷ A at any kernel speed. The printed counts show whether any product beyond the input gradients runs.

    python -m oxygen_ros.bench.probes.rtc_floor [--preset bench] [--threads 1] [--rounds 3]

One torch thread is timed by the thread's CPU time (steadier on a shared machine); more by the wall clock.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from oxygen_ros.model.backends.compiled import FusedActionSampler
from oxygen_ros.model.network.rtc import sample_actions_rtc

from oxygen_ros.bench.machine import describe, machine_info
from oxygen_ros.bench.matmul_floor import MatmulFloor
from oxygen_ros.bench.probes.prefill_layer import median_ms_timer
from oxygen_ros.bench.rtc import bench_guide
from oxygen_ros.bench.workload import Workload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oxygen_ros.bench.probes.rtc_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="bench")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    median_ms = median_ms_timer(args.threads, args.repeats)
    workload = Workload(args.preset, "cpu", args.dtype)
    model = workload.build_model()
    cfg, b = model.config, model.config.backbone
    frame = workload.frames(cfg)[0]
    k = torch.zeros(b.depth, cfg.max_prefix_tokens, b.num_kv_heads, b.head_dim, dtype=model.dtype)
    v = torch.zeros_like(k)
    n = model.prefill(frame.images, frame.image_mask, frame.prompt_tokens, k, v).length
    k, v = k[:, :n].clone(), v[:, :n].clone()
    noise, guide = workload.noise(cfg, 0), bench_guide(cfg)
    sampler = FusedActionSampler(model, lambda _: None)
    sampler.warm_up(n)
    sampler.warm_up_rtc(n)
    calls = {
        "A (plain chunk, compiled)": lambda: sampler(k, v, noise),
        "A_rtc (guided chunk, compiled)": lambda: sampler.sample_rtc(k, v, noise, guide.target, guide.weights, guide.beta),
        "A_rtc eager": lambda: sample_actions_rtc(model, k, v, noise, guide.target, guide.weights, guide.beta),
    }
    plain = MatmulFloor.capture(lambda: model.sample_actions(k, v, noise), model.device)
    guided = MatmulFloor.capture(
        lambda: sample_actions_rtc(model, k, v, noise, guide.target, guide.weights, guide.beta), model.device, grad=True)
    calls["products of A alone"] = plain.time_once
    calls["products of A_rtc alone"] = guided.time_once
    rounds: dict[str, list[float]] = {label: [] for label in calls}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for label, fn in calls.items():
                rounds[label].append(median_ms(fn))
    ms = {label: statistics.median(times) for label, times in rounds.items()}
    print(f"machine: {describe(machine_info('cpu', None))}; torch threads {args.threads}; preset {args.preset}, "
          f"{args.dtype}, prefix {n}, horizon {cfg.action_horizon}, {cfg.num_denoise_steps} steps; fused {sampler.fused}")
    print(f"products: plain chunk {plain.count} ({plain.flops / 1e9:.3f} GFLOP), guided chunk {guided.count} "
          f"({guided.flops / 1e9:.3f} GFLOP): {(guided.count - plain.count) / plain.count:.2f} backward products "
          f"per forward product")
    for label, value in ms.items():
        print(f"  {label:<34}{value:9.2f} ms")
    a = ms["A (plain chunk, compiled)"]
    print(f"A_rtc / A = {ms['A_rtc (guided chunk, compiled)'] / a:.2f} (eager A_rtc / A = {ms['A_rtc eager'] / a:.2f}); "
          f"floor from the products alone = {ms['products of A_rtc alone'] / ms['products of A alone']:.2f}; "
          f"products of A = {ms['products of A alone'] / a:.0%} of A")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
