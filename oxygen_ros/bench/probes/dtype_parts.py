"""One frame's parts in bfloat16 against float32 on this CPU, side by side in one run.

Times the prefill P, the action chunk A and one decode step D(N) of a preset in both dtypes, the engine's
paths (decode weights packed for oneDNN where the CPU allows it, as an ``Engine`` does), interleaved round by
round so both see the same machine, and prints the bfloat16 / float32 ratios. It is what decides the dtype
``auto`` picks on a CPU (``model/network/cpu_bfloat16.py``); run it under ``ONEDNN_MAX_CPU_ISA=AVX2
ATEN_CPU_CAPABILITY=avx2`` to see an AVX2-only CPU's figures on a newer one.

    python -m oxygen_ros.bench.probes.dtype_parts [--preset bench] [--rows 30] [--rounds 3] [--compiled]

One torch thread, timed by the thread's CPU time (steadier on a shared machine).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from oxygen_ros.model.network.cpu_bfloat16 import isa_summary, onednn_bfloat16_refusal

from oxygen_ros.bench.machine import describe, machine_info
from oxygen_ros.bench.workload import BenchRuntime, Workload

PARTS = ("prefill", "chunk", "decode")


class DtypeParts:
    """A model in one dtype with its engine's prefill and chunk paths and N live requests to decode."""

    def __init__(self, preset: str, dtype: str, rows: int, steps: int, compiled: bool) -> None:
        backend = "compiled" if compiled else "eager"
        self.workload = Workload(preset, "cpu", dtype, actions=backend, prefill=backend, lanes=False)
        self.model = self.workload.build_model()
        runtime = BenchRuntime(self.workload, self.model, progress=lambda *_: None)
        self.frames = self.workload.frames(self.model.config)
        self.engine = self.workload.engine(self.model, decode_len=1, runtime=runtime)
        self.decoder = self.workload.decoding_engine(self.model, rows, steps)
        self.noise = self.workload.noise(self.model.config, 0)
        self.packed_mb = self.engine.packed_decode_bytes / 1e6  # the first engine on the model packs

    def calls(self) -> dict[str, Callable[[], object]]:
        def prefill() -> None:
            prefix, _ = self.engine.prefill(self.frames[0])
            self.engine.kv.release(prefix)

        def chunk() -> None:
            prefix, _ = self.engine.prefill(self.frames[0])
            try:
                start = time.thread_time()
                self.engine.act(prefix, self.noise)
                self.chunk_s = time.thread_time() - start
            finally:
                self.engine.kv.release(prefix)

        return {"prefill": prefill, "chunk": chunk, "decode": self.decoder.decode_step}


def timed_ms(name: str, parts: DtypeParts, fn: Callable[[], object]) -> float:
    start = time.thread_time()
    fn()
    if name == "chunk":  # the chunk alone, without the prefill it needs
        return 1e3 * parts.chunk_s
    return 1e3 * (time.thread_time() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oxygen_ros.bench.probes.dtype_parts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="bench")
    parser.add_argument("--rows", type=int, default=30, help="live requests of the decode step")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="calls of each part per round (the median kept)")
    parser.add_argument("--compiled", action="store_true", help="the compiled prefill and chunk (else eager)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"machine: {describe(machine_info('cpu', None))}; {isa_summary()}")
    print(f"oneDNN bfloat16: {onednn_bfloat16_refusal() or 'packs and multiplies'}")
    print(f"preset {args.preset}, {'compiled' if args.compiled else 'eager'} prefill and chunk, D at {args.rows} rows, "
          f"one thread, {args.rounds} rounds x {args.repeats} calls")
    with torch.inference_mode():
        models = {dtype: DtypeParts(args.preset, dtype, args.rows, (args.rounds + 1) * args.repeats, args.compiled) for dtype in ("float32", "bfloat16")}
        times: dict[str, dict[str, list[float]]] = {d: {p: [] for p in PARTS} for d in models}
        for parts in models.values():  # first calls (allocations, kernel choice) untimed
            for fn in parts.calls().values():
                fn()
        for _ in range(args.rounds):
            for dtype, parts in models.items():
                for name, fn in parts.calls().items():
                    times[dtype][name].append(statistics.median(timed_ms(name, parts, fn) for _ in range(args.repeats)))
    print(f"{'part':<9}{'float32 ms':>12}{'bfloat16 ms':>13}{'bf16/fp32':>11}")
    for name in PARTS:
        f32, bf16 = (statistics.median(times[d][name]) for d in ("float32", "bfloat16"))
        label = f"D({args.rows})" if name == "decode" else name
        print(f"{label:<9}{f32:12.1f}{bf16:13.1f}{bf16 / f32:11.2f}")
    print(f"bfloat16 decode weights packed for oneDNN: {models['bfloat16'].packed_mb:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
