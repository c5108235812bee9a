"""One layer of the prefill compiled several ways, each beside its matrix products alone (same shapes, dtype).

The compiled prefill is 18 calls of one compiled backbone layer and a few of one vision block
(``model.compiled_prefill``), so a layer's time against its own matrix products is the prefill's ratio to its
floor (``oxygen-bench`` prints the whole prefill's). Variants, each a ``torch.compile`` of the same function:

* ``compiled``: as the prefill ships (weights are graph inputs, C++ wrapper);
* ``+freezing``: inductor's freezing path (weights folded in as constants, prepacked for oneDNN, linear
  post-op fusion where it applies). Frozen weights are constants of one layer: the shipped prefill shares one
  graph among all layers of a kind, which freezing would turn into one graph per layer;
* ``gate+up one product``: the gated MLP's two input projections as one [2·mlp, width] product;
* ``torch's tanh GELU``: the MLPs with ``F.gelu(approximate="tanh")``, as compiled before ``layers.gelu_tanh``
  wrote it out for the CPU.

    python -m oxygen_ros.bench.probes.prefill_layer [--preset bench pi05] [--threads 1] [--repeats 15]

One torch thread is timed by the thread's CPU time (steadier on a shared machine); more by the wall clock.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oxygen_ros.model.network.config import ModelConfig, preset
from oxygen_ros.model.network.layers import RotaryEmbedding, gelu_tanh
from oxygen_ros.model.network.mot import ExpertBlock
from oxygen_ros.model.network.prefix_attention import text_rows_mask
from oxygen_ros.model.network.vision import SiglipBlock, block_on_rows
from oxygen_ros.model.network.vla import prefix_layer

from oxygen_ros.bench.machine import describe, machine_info
from oxygen_ros.bench.matmul_floor import MatmulFloor
from oxygen_ros.bench.probes.prefix_attention import median_seconds
from oxygen_ros.bench.workload import PROMPT_TOKENS

CAMERAS = 2  # the benchmark's frame: two cameras and a 13-token prompt


class OneProductGeGLU(nn.Module):
    """``GeGLU`` with its gate and up projections stacked into one weight: one product, then split."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.gate_up = nn.Parameter(torch.cat((mlp.gate_proj.weight, mlp.up_proj.weight)), requires_grad=False)
        self.down_proj = mlp.down_proj

    def forward(self, x: Tensor) -> Tensor:
        gate, up = F.linear(x, self.gate_up).chunk(2, dim=-1)
        return self.down_proj(gelu_tanh(gate) * up)


class TorchTanhGeGLU(nn.Module):
    """``GeGLU`` with torch's own tanh GELU, as compiled before ``gelu_tanh`` was written out for the CPU."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = mlp.gate_proj, mlp.up_proj, mlp.down_proj

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class TorchTanhSiglipMLP(nn.Module):
    """``SiglipMLP`` with torch's own tanh GELU."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.fc1, self.fc2 = mlp.fc1, mlp.fc2

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


def with_mlp(block: nn.Module, mlp: nn.Module) -> nn.Module:
    """A shallow copy of ``block`` with its own module table and ``mlp`` in it (the weights stay shared)."""
    other = copy.copy(block)
    other._modules = dict(block._modules)
    other.mlp = mlp
    return other


def median_ms_timer(threads: int, repeats: int) -> Callable[[Callable[[], object]], float]:
    """``fn`` → the median of its timed calls, in ms (``prefix_attention.median_seconds``): one torch thread
    timed by the thread's CPU time (steadier on a shared machine), more by the wall clock."""
    clock = time.thread_time if threads == 1 else time.perf_counter
    return lambda fn: 1e3 * median_seconds(fn, repeats, clock)


def layer_inputs(config: ModelConfig, dtype: torch.dtype) -> tuple[ExpertBlock, SiglipBlock, tuple, Tensor]:
    """Random-weight blocks of the preset and the inputs of one frame: a backbone layer's (x, cos, sin, mask)
    in ``causal_text``, and the vision block's patch rows."""
    b, v = config.backbone, config.vision
    n_img = CAMERAS * config.tokens_per_image
    t = n_img + PROMPT_TOKENS
    block = ExpertBlock(b).to(dtype).eval().requires_grad_(False)
    vision = SiglipBlock(v).to(dtype).eval().requires_grad_(False)
    cos, sin = RotaryEmbedding(b.head_dim, config.rope_theta).cos_sin(torch.arange(t).unsqueeze(0), dtype)
    mask = text_rows_mask(n_img, PROMPT_TOKENS, b.num_heads // b.num_kv_heads, torch.device("cpu"))
    return block, vision, (torch.randn(1, t, b.width, dtype=dtype), cos, sin, mask), torch.randn(n_img, v.width, dtype=dtype)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oxygen_ros.bench.probes.prefill_layer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", nargs="+", default=["bench"])
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all variants; the median is printed")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    median_ms = median_ms_timer(args.threads, args.repeats)
    dtype = getattr(torch, args.dtype)
    print(f"machine: {describe(machine_info('cpu', None))}; torch threads {args.threads} "
          f"({'thread CPU time' if args.threads == 1 else 'wall'}), {args.dtype}, {CAMERAS} cameras + {PROMPT_TOKENS} tokens")
    compile_cpu = {"cpp_wrapper": True}
    for name in args.preset:
        torch.manual_seed(0)
        block, vision, inputs, rows = layer_inputs(preset(name), dtype)
        one_product = with_mlp(block, OneProductGeGLU(block.mlp))
        torch_tanh = (with_mlp(block, TorchTanhGeGLU(block.mlp)), with_mlp(vision, TorchTanhSiglipMLP(vision.mlp)))
        with torch.inference_mode():
            expected = prefix_layer(block, *inputs)[0].float()
            floors = {"backbone layer": MatmulFloor.capture(lambda: prefix_layer(block, *inputs), rows.device),
                      "vision block": MatmulFloor.capture(lambda: block_on_rows(vision, rows), rows.device)}
            variants: dict[str, dict[str, Callable[[], object]]] = {"backbone layer": {}, "vision block": {}}
            for label, blk, vis, options in (("compiled", block, vision, compile_cpu),
                                             ("+freezing", block, vision, {**compile_cpu, "freezing": True}),
                                             ("gate+up one product", one_product, None, compile_cpu),
                                             ("torch's tanh GELU", *torch_tanh, compile_cpu)):
                torch._dynamo.reset()  # each variant its own graphs (a frozen graph is tied to its weights)
                fn = torch.compile(prefix_layer, fullgraph=True, dynamic=False, options=options)
                got = fn(blk, *inputs)[0].float()
                err = (got - expected).abs().max().item()
                variants["backbone layer"][f"{label} (max |diff| vs eager {err:.3g})"] = (
                    lambda fn=fn, blk=blk: fn(blk, *inputs))
                if vis is not None:
                    vfn = torch.compile(block_on_rows, fullgraph=True, dynamic=False, options=options)
                    vfn(vis, rows)
                    variants["vision block"][label] = lambda vfn=vfn, vis=vis: vfn(vis, rows)
            variants["backbone layer"]["eager"] = lambda: prefix_layer(block, *inputs)
            variants["vision block"]["eager"] = lambda: block_on_rows(vision, rows)
            for part, fns in variants.items():
                rounds: dict[str, list[float]] = {"matrix products alone": []} | {label: [] for label in fns}
                for _ in range(args.rounds):
                    rounds["matrix products alone"].append(median_ms(floors[part].time_once))
                    for label, fn in fns.items():
                        rounds[label].append(median_ms(fn))
                floor = statistics.median(rounds["matrix products alone"])
                print(f"{name} {part} ({floors[part].count} products, {floors[part].flops / 1e9:.2f} GFLOP):")
                for label, times in rounds.items():
                    ms = statistics.median(times)
                    print(f"  {label:<52}{ms:9.2f} ms {ms / floor:6.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
