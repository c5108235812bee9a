"""The prefill without per-op overhead: each layer of the vision tower and the backbone compiled by
``torch.compile``.

The eager prefill is a few thousand ops (norms, RoPE, GELU and its product, residuals) between the matrix
products of every layer. Compiling the layer functions of :meth:`Pi05Model.prefix_network` (``vla.PrefixLayers``:
a vision block, a backbone layer, the last backbone layer) fuses that work into generated C++ loops. All
layers of a kind share one compiled graph (the weights are its inputs), so compiling takes seconds, not the
minutes of the whole unrolled network, and the on-disk cache holds three small graphs.

* Compiled once at start-up with the prefix's sizes dynamic: the image patch rows (N·P, N valid cameras) and
  the prompt length, so every prompt and camera count reuses the same graphs (tests count recompilations).
  The vision block has a second graph for a single camera (N = 1 is specialized in its attention's batch);
  the warm-up compiles both.
* Sizes 0 and 1 are specialized by Dynamo: a frame with no valid camera or a one-token prompt runs the eager
  layers (same results) rather than compiling new graphs on the control path.
* Compiling failures fall back to the eager layers once, with one warning (``compiled.CompiledPath``). Bad
  input (a wrong image shape, too long a prompt) is refused with the same ``ValueError`` as the eager path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from .compiled import CompiledPath, fast_guards
from .vla import EAGER_LAYERS, Pi05Model, PrefixLayers, PrefixOutput

PREFILL_BACKENDS = ("eager", "compiled", "auto")


class Prefiller(Protocol):
    """:meth:`Pi05Model.prefill`'s signature: an observation → its KV written into k_out/v_out."""

    def __call__(self, images: Tensor, image_mask: Tensor, tokens: Tensor, k_out: Tensor, v_out: Tensor) -> PrefixOutput: ...


def _dynamic(x: Tensor, *dims: int) -> Tensor:
    for d in dims:
        torch._dynamo.mark_dynamic(x, d)
    return x


def _patch_rows(x: Tensor) -> Tensor:
    """A vision block's rows [N·P, W]: dynamic, but a single image (N = 1, a size Dynamo specializes in the
    attention's batch) gets a graph of its own; the warm-up compiles both."""
    torch._dynamo.maybe_mark_dynamic(x, 0)
    return x


class FusedPrefill(CompiledPath):
    """Prefills through the compiled layer functions, with eager as the fallback."""

    what = "prefill"

    def __init__(self, model: Pi05Model, progress: Callable[[str], None] | None = None) -> None:
        super().__init__(model, progress)
        # The prefix's sizes are dynamic in every input that carries them; the weights are the graph's inputs.
        self._layers = PrefixLayers(
            vision=lambda block, x: self._run("vision", block, _patch_rows(x)),
            backbone=lambda block, x, cos, sin, mask: self._run(
                "backbone", block, _dynamic(x, 1), _dynamic(cos, 1), _dynamic(sin, 1),
                None if mask is None else _dynamic(mask, 0, 1)),
            last=lambda block, x, cos, sin: self._run("last", block, _dynamic(x, 1), _dynamic(cos, 1), _dynamic(sin, 1)),
        )

    def _build(self) -> PrefixLayers:
        return PrefixLayers(*(self.compile(getattr(EAGER_LAYERS, kind)) for kind in ("vision", "backbone", "last")))

    def _run(self, kind: str, *args):  # noqa: ANN002, ANN202
        if self._compiled is not None:
            try:
                return getattr(self._compiled, kind)(*args)
            except Exception as exc:  # noqa: BLE001 - any compiler failure means: fall back to eager, once
                self._fail(exc)
        return getattr(EAGER_LAYERS, kind)(*args)

    def __call__(self, images: Tensor, image_mask: Tensor, tokens: Tensor, k_out: Tensor, v_out: Tensor) -> PrefixOutput:
        if self._compiled is None or not bool(image_mask.any()) or tokens.numel() < 2:  # 0 and 1 would specialize
            return self.model.prefill(images, image_mask, tokens, k_out, v_out)
        with fast_guards():
            return self.model.prefill(images, image_mask, tokens, k_out, v_out, self._layers)

    def warm_up(self) -> float:
        """Compile now (start-up) on blank observations; returns the seconds it took (0 when not compiling)."""
        cfg, b = self.model.config, self.model.config.backbone
        s, slots = cfg.vision.image_size, cfg.num_image_slots
        images = torch.zeros(slots, 3, s, s)
        k = torch.zeros(b.depth, cfg.max_prefix_tokens, b.num_kv_heads, b.head_dim, dtype=self.model.dtype,
                        device=self.model.device)
        tokens = torch.full((cfg.max_prompt_tokens,), cfg.bos_token_id)
        all_slots = torch.ones(slots, dtype=torch.bool)
        one_slot = torch.zeros(slots, dtype=torch.bool)
        one_slot[0] = True

        def calls() -> None:
            self(images, all_slots, tokens[: min(8, len(tokens))], k, k)
            self(images, one_slot, tokens[: min(5, len(tokens))], k, k)  # one camera: its own vision graph

        return self._timed_warm_up(calls)


def make_prefiller(model: Pi05Model, backend: str = "auto", progress: Callable[[str], None] | None = None) -> Prefiller:
    """``eager``: plain :meth:`Pi05Model.prefill`; ``compiled``: the fused prefill (compiled at once, eager
    fallback with one warning); ``auto``: compiled on a CPU, eager on CUDA. On an H200 the compiled layers were
    slower than eager for the full pi05 prefill (24.7 against 21.5 ms; the GPU busy 7.2 of 22.6 ms): the host
    launching the layers' graphs one by one is the cost there, which compiling does not remove
    (docs/performance.md, GPU path)."""
    if backend not in PREFILL_BACKENDS:
        raise ValueError(f"unknown prefill backend {backend!r}; choose one of {PREFILL_BACKENDS}")
    if backend == "eager" or (backend == "auto" and model.device.type == "cuda"):
        return model.prefill
    prefiller = FusedPrefill(model, progress)
    prefiller.warm_up()
    return prefiller
