"""How to attend over a prefix, measured side by side: one layer's attention of a frame's prefix (two cameras
and a prompt) by the dense boolean mask, by block-wise fused-attention calls (``model.prefix_attention``) and
by flex attention (compiled), in both prefix attention modes; and the block-wise attention compiled, as the
compiled prefill runs it (on a CPU written out as matrix products around a fused softmax:
``layers.dot_product_attention``).

    python -m oxygen_ros.bench.probes.prefix_attention [--preset bench pi05] [--dtype float32 bfloat16] [--cpu-time]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor

from oxygen_ros.model.network.config import preset
from oxygen_ros.model.network.layers import attend
from oxygen_ros.model.network.prefix_attention import prefix_attention, text_rows_mask

from oxygen_ros.bench.machine import describe, machine_info


def median_seconds(fn: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """The median of ``repeats`` timed calls of ``fn`` after two untimed ones."""
    fn()
    fn()
    samples = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return statistics.median(samples)


def dense_mask(n_img: int, t: int, causal_text: bool) -> Tensor:
    mask = torch.ones(t, t, dtype=torch.bool)
    if causal_text:
        mask = mask.tril()
        mask[:n_img, :n_img] = True
    return mask


def flex_fn(n_img: int, t: int, causal_text: bool) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def visible(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
        return (kv_idx < n_img) | (kv_idx <= q_idx) if causal_text else kv_idx >= 0

    block = create_block_mask(visible, None, None, t, t, device="cpu")
    compiled = torch.compile(flex_attention, dynamic=False)

    def run(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        out = compiled(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=block, enable_gqa=True)
        return out.transpose(1, 2).flatten(2)

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", nargs="+", default=["bench", "pi05"])
    parser.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--prompt-tokens", type=int, nargs="+", default=[13, 200])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--no-flex", dest="flex", action="store_false")
    parser.add_argument("--cpu-time", action="store_true",
                        help="one torch thread, timed by the thread's CPU time (steadier on a shared machine)")
    args = parser.parse_args(argv)
    clock = time.perf_counter
    if args.cpu_time:
        torch.set_num_threads(1)
        clock = time.thread_time
    print(f"machine: {describe(machine_info('cpu', None))}; torch threads {torch.get_num_threads()}")
    print(f"{'preset':<7}{'dtype':<10}{'T':>5}{'mode':>15}{'dense ms':>10}{'blocks ms':>11}{'flex ms':>9}{'blocks/dense':>14}"
          f"{'compiled ms':>13}{'compiled/blocks':>17}")
    g = torch.Generator().manual_seed(0)
    for name in args.preset:
        b = preset(name).backbone
        n_img = 2 * preset(name).tokens_per_image
        for dtype_name in args.dtype:
            dtype = getattr(torch, dtype_name)
            for n_txt in args.prompt_tokens:
                t = n_img + n_txt
                q = torch.randn(1, t, b.num_heads, b.head_dim, generator=g).to(dtype)
                k = torch.randn(1, t, b.num_kv_heads, b.head_dim, generator=g).to(dtype)
                v = torch.randn(1, t, b.num_kv_heads, b.head_dim, generator=g).to(dtype)
                for mode in ("causal_text", "bidirectional"):
                    causal = mode == "causal_text"
                    mask = dense_mask(n_img, t, causal).unsqueeze(0)
                    text_mask = text_rows_mask(n_img, n_txt, b.num_heads // b.num_kv_heads, q.device) if causal else None
                    with torch.inference_mode():
                        ref = attend(q, k, v, mask)
                        got = prefix_attention(q, k, v, text_mask)
                        torch.testing.assert_close(got.float(), ref.float(), rtol=2e-2, atol=2e-2)
                        dense = median_seconds(lambda: attend(q, k, v, mask), args.repeats, clock)
                        blocks = median_seconds(lambda: prefix_attention(q, k, v, text_mask), args.repeats, clock)
                        compiled = torch.compile(prefix_attention, dynamic=False)
                        torch.testing.assert_close(compiled(q, k, v, text_mask).float(), ref.float(), rtol=2e-2, atol=2e-2)
                        fused = median_seconds(lambda: compiled(q, k, v, text_mask), args.repeats, clock)
                        flex = float("nan")
                        if args.flex:
                            try:
                                fn = flex_fn(n_img, t, causal)
                                torch.testing.assert_close(fn(q, k, v).float(), ref.float(), rtol=2e-2, atol=2e-2)
                                flex = median_seconds(lambda: fn(q, k, v), args.repeats, clock)
                            except Exception as exc:  # noqa: BLE001 - report, go on
                                print(f"  flex attention failed: {type(exc).__name__}: {str(exc).splitlines()[0]}")
                    print(f"{name:<7}{dtype_name:<10}{t:>5}{mode:>15}{dense * 1e3:>10.2f}{blocks * 1e3:>11.2f}"
                          f"{flex * 1e3:>9.2f}{blocks / dense:>14.2f}{fused * 1e3:>13.2f}{fused / blocks:>17.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
