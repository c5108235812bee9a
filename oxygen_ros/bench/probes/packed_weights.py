"""The decode step's matrix products with plain weights against weights prepacked for oneDNN.

A decode step multiplies a few rows (one per live request) by every weight of the backbone and by the text
head. With a plain ``[out, in]`` weight oneDNN reorders the weight into its blocked layout inside every call.
At prefill sizes that cost hides behind hundreds of rows; at decode sizes it can be a large part of the
product. ``torch.ops.mkldnn._reorder_linear_weight`` does the reorder once (a second copy of the weight, in
oneDNN's layout), and ``mkldnn._linear_pointwise`` multiplies by it, as the engine's decode step does
(``model/network/packed_decode.py``: ``pack_weight``, ``packed_linear``). This tool times both forms for the
shapes of one decode step of a preset (each product of a backbone layer, and the text head over the whole
vocabulary), says whether they give the same bits (in bfloat16 both forms are oneDNN's; in float32 the plain
product is MKL's), and prints the memory the packed copies would take.

    python -m oxygen_ros.bench.probes.packed_weights [--preset bench] [--rows 1 8 30 80] [--threads 1]

One torch thread is timed by the thread's CPU time (steadier on a shared machine); more by the wall clock.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

from oxygen_ros.model.network.cpu_bfloat16 import onednn_bfloat16_refusal
from oxygen_ros.model.network.packed_decode import pack_weight, packed_linear

from oxygen_ros.bench.machine import describe, machine_info
from oxygen_ros.bench.probes.prefill_layer import median_ms_timer
from oxygen_ros.bench.workload import Workload, bf16_supported


def decode_products(preset: str) -> tuple[dict[str, tuple[int, int]], int, tuple[int, int]]:
    """(name → (out, in) of one backbone layer's weights, depth, the text head's (vocabulary, width))."""
    config = Workload(preset, "cpu", "float32").model_config()
    b = config.backbone
    q, kv = b.num_heads * b.head_dim, b.num_kv_heads * b.head_dim
    layer = {"q": (q, b.width), "k": (kv, b.width), "v": (kv, b.width), "o": (b.width, q),
             "gate": (b.mlp_dim, b.width), "up": (b.mlp_dim, b.width), "down": (b.width, b.mlp_dim)}
    return layer, b.depth, (config.vocab_size, b.width)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oxygen_ros.bench.probes.packed_weights", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="bench")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"),
                        default="bfloat16" if bf16_supported("cpu") else "float32")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 30, 80], help="rows of one decode step")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.dtype == "bfloat16" and onednn_bfloat16_refusal():
        print(f"{onednn_bfloat16_refusal()}: the runtime packs nothing here, nothing to compare")
        return 1
    if not torch.backends.mkldnn.is_available():
        print("oneDNN is not available in this torch build: nothing to compare")
        return 1
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    median_ms = median_ms_timer(args.threads, args.repeats)
    layer, depth, head = decode_products(args.preset)
    print(f"machine: {describe(machine_info('cpu', None))}; preset {args.preset}, {args.dtype}, "
          f"{depth} layers, text head {head[0]} x {head[1]}")
    g = torch.Generator().manual_seed(0)
    shapes = {**{f"layer {name}": shape for name, shape in layer.items()}, "text head": head}
    weights = {name: (torch.randn(shape, generator=g) * 0.02).to(dtype) for name, shape in shapes.items()}
    item = torch.finfo(dtype).bits // 8
    layer_mb = depth * sum(o * i for o, i in layer.values()) * item / 2**20
    print(f"a packed copy of every decode weight: {layer_mb:.1f} MB for the layers, "
          f"{head[0] * head[1] * item / 2**20:.1f} MB for the text head")
    with torch.inference_mode():
        for rows in args.rows:
            packed = {name: pack_weight(w) for name, w in weights.items()}
            print(f"\n{rows} rows: {'product':<12}{'plain ms':>10}{'packed ms':>11}{'ratio':>8}  same bits")
            step = {"plain": 0.0, "packed": 0.0}
            for name, w in weights.items():
                x = torch.randn(rows, w.shape[1], generator=g).to(dtype)
                plain_fn = lambda: F.linear(x, w)  # noqa: E731
                packed_fn = lambda: packed_linear(x, packed[name])  # noqa: E731
                same = torch.equal(plain_fn(), packed_fn())
                times = {"plain": [], "packed": []}
                for _ in range(args.rounds):
                    times["plain"].append(median_ms(plain_fn))
                    times["packed"].append(median_ms(packed_fn))
                plain, pack = statistics.median(times["plain"]), statistics.median(times["packed"])
                count = 1 if name == "text head" else depth
                step["plain"] += count * plain
                step["packed"] += count * pack
                print(f"{'':>{len(str(rows)) + 7}}{name:<12}{plain:10.3f}{pack:11.3f}{pack / plain:8.2f}  {same}")
            print(f"  one decode step's products ({depth} layers and the head): plain {step['plain']:.2f} ms, "
                  f"packed {step['packed']:.2f} ms ({step['packed'] / step['plain']:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
