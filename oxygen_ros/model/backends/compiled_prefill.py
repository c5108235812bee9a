"""The prefill without per-op overhead: each layer of the vision tower and the backbone compiled by
``torch.compile``.

The eager prefill is a few thousand ops (norms, RoPE, GELU and its product, residuals) between the matrix
products of every layer. Compiling the layer functions of :meth:`Pi05Model.prefix_network` (``vla.PrefixLayers``:
a vision block, a backbone layer, the last backbone layer) fuses that work into generated C++ loops. All
layers of a kind share one compiled graph (the weights are its inputs), so compiling takes seconds, not the
minutes of the whole unrolled network, and the on-disk cache holds three small graphs.

* Compiled once at start-up with the prefix's sizes dynamic: the images (N valid cameras, a vision block on [N, P, W]) and
  the prompt length, so every prompt and camera count reuses the same graphs (tests count recompilations).
  The vision block has a second graph for a single camera (N = 1 is specialized in its attention's batch);
  the warm-up compiles both.
* Sizes 0 and 1 are specialized by Dynamo: a frame with no valid camera or a one-token prompt runs the eager
  layers (same results) rather than compiling new graphs on the control path.
* A fleet's frames (``prefill_batch``: B robots' ragged prompts, each its own camera mask) run through
  compiled forms of ``batched_prefill``'s layers, with the batch size, the padded length and the masks dynamic:
  one compilation for every B ≥ 2 and every mix of prompts and cameras (a graph for prefixes that share their
  image count, one for prefixes that do not). They compile at start-up when a second robot is added
  (``warm_up_batch``); a batch of one frame takes the one-frame graphs.
* Compiling failures fall back to the eager layers once, with one warning (``compiled.CompiledPath``). Bad
  input (a wrong image shape, too long a prompt) is refused with the same ``ValueError`` as the eager path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch
from torch import Tensor

from oxygen_ros.model.network.batched_prefill import EAGER_BATCH_LAYERS, BatchLayers, PrefixFrame, prefill_batch
from oxygen_ros.model.backends.compiled import CompiledPath, fast_guards
from oxygen_ros.model.network.choices import PREFILL_BACKENDS
from oxygen_ros.model.network.vision import SiglipBlock, block_on_images
from oxygen_ros.model.network.vla import EAGER_LAYERS, Pi05Model, PrefixLayers, PrefixOutput



class Prefiller(Protocol):
    """:meth:`Pi05Model.prefill`'s signature: an observation → its KV written into k_out/v_out."""

    def __call__(self, images: Tensor, image_mask: Tensor, tokens: Tensor, k_out: Tensor, v_out: Tensor) -> PrefixOutput: ...


def _dynamic(x: Tensor, *dims: int) -> Tensor:
    for d in dims:
        torch._dynamo.mark_dynamic(x, d)
    return x


def _images(x: Tensor) -> Tensor:
    """A vision block's input [N, P, W]: N dynamic, but a single image (N = 1, a size Dynamo specializes in)
    gets a graph of its own; the warm-up compiles both."""
    torch._dynamo.maybe_mark_dynamic(x, 0)
    return x


def _vision_rows(run: Callable[[str, SiglipBlock, Tensor], Tensor]) -> Callable[[SiglipBlock, Tensor], Tensor]:
    """The vision layer on patch rows [N·P, W] through ``run``'s image form (``vision.block_on_images``)."""
    return lambda block, x: run("vision", block, _images(x.view(-1, block.num_patches, x.shape[-1]))).view(x.shape)


# Every layer function by name: the one-frame layers (``vla.PrefixLayers``) and the batched ones.
EAGER_FUNCTIONS: dict[str, Callable] = {
    "vision": block_on_images, "backbone": EAGER_LAYERS.backbone, "last": EAGER_LAYERS.last,
    "batch_backbone": EAGER_BATCH_LAYERS.backbone, "batch_last": EAGER_BATCH_LAYERS.last,
}


class FusedPrefill(CompiledPath):
    """Prefills through the compiled layer functions, with eager as the fallback."""

    what = "prefill"

    def __init__(self, model: Pi05Model, progress: Callable[[str], None] | None = None) -> None:
        super().__init__(model, progress)
        self.batch_compile_s: float | None = None  # wall time of the batched graphs' warm-up
        # The prefix's sizes are dynamic in every input that carries them; the weights are the graph's inputs.
        self._layers = PrefixLayers(
            vision=_vision_rows(self._run),
            backbone=lambda block, x, cos, sin, mask: self._run(
                "backbone", block, _dynamic(x, 1), _dynamic(cos, 1), _dynamic(sin, 1),
                None if mask is None else _dynamic(mask, 0, 1)),
            last=lambda block, x, cos, sin: self._run("last", block, _dynamic(x, 1), _dynamic(cos, 1), _dynamic(sin, 1)),
        )
        # Batch, padded length and mask rows dynamic (causal_text's rows [B, 1, S·G, T]; bidirectional's are
        # the keys [B, 1, 1, T]); the mode flag is a constant of the model.
        self._batch_layers = BatchLayers(
            vision=self._layers.vision,
            backbone=lambda block, x, cos, sin, rows, causal: self._run(
                "batch_backbone", block, _dynamic(x, 0, 1), _dynamic(cos, 1), _dynamic(sin, 1),
                _dynamic(rows, 0, 2, 3) if causal else _dynamic(rows, 0, 3), causal),
            last=lambda block, x, cos, sin, last, keys: self._run(
                "batch_last", block, _dynamic(x, 0, 1), _dynamic(cos, 1), _dynamic(sin, 1), _dynamic(last, 0),
                _dynamic(keys, 0, 3)),
        )

    def _build(self) -> dict[str, Callable]:
        return {kind: self.compile(f"prefill {kind}", fn) for kind, fn in EAGER_FUNCTIONS.items()}

    def _run(self, kind: str, *args):  # noqa: ANN002, ANN202
        if self._compiled is not None:
            try:
                return self._compiled[kind](*args)
            except Exception as exc:  # noqa: BLE001 - any compiler failure means: fall back to eager, once
                self._fail(exc)
        return EAGER_FUNCTIONS[kind](*args)

    def __call__(self, images: Tensor, image_mask: Tensor, tokens: Tensor, k_out: Tensor, v_out: Tensor) -> PrefixOutput:
        if self._compiled is None or not bool(image_mask.any()) or tokens.numel() < 2:  # 0 and 1 would specialize
            return self.model.prefill(images, image_mask, tokens, k_out, v_out)
        with fast_guards():
            return self.model.prefill(images, image_mask, tokens, k_out, v_out, self._layers)

    def prefill_batch(self, frames: Sequence[PrefixFrame], k_outs: Sequence[Tensor],
                      v_outs: Sequence[Tensor]) -> list[PrefixOutput]:
        """B frames in one call through the compiled batched layers (``batched_prefill.prefill_batch``); one
        frame through the one-frame graphs. Frames with no camera at all, or one-token prompts only, take the
        eager batched layers (sizes 0 and 1 would specialize the graphs)."""
        if len(frames) == 1 and len(k_outs) == 1 and len(v_outs) == 1:
            return [self(*frames[0], k_outs[0], v_outs[0])]
        if self._compiled is None or not _compilable_batch(frames):
            return prefill_batch(self.model, frames, k_outs, v_outs)
        with fast_guards():
            return prefill_batch(self.model, frames, k_outs, v_outs, self._batch_layers)

    def _blank(self) -> tuple[Tensor, Tensor, Tensor]:
        """Blank images, a KV destination of the longest prefix and a prompt of the longest length."""
        cfg, b = self.model.config, self.model.config.backbone
        s, slots = cfg.vision.image_size, cfg.num_image_slots
        k = torch.zeros(b.depth, cfg.max_prefix_tokens, b.num_kv_heads, b.head_dim, dtype=self.model.dtype,
                        device=self.model.device)
        return torch.zeros(slots, 3, s, s), k, torch.full((cfg.max_prompt_tokens,), cfg.bos_token_id)

    def warm_up(self) -> float:
        """Compile now (start-up) on blank observations; returns the seconds it took (0 when not compiling)."""
        images, k, tokens = self._blank()
        slots = images.shape[0]
        all_slots = torch.ones(slots, dtype=torch.bool)
        one_slot = torch.zeros(slots, dtype=torch.bool)
        one_slot[0] = True

        def calls() -> None:
            self(images, all_slots, tokens[: min(8, len(tokens))], k, k)
            self(images, one_slot, tokens[: min(5, len(tokens))], k, k)  # one camera: its own vision graph

        return self._timed_warm_up(calls)

    def warm_up_batch(self) -> float:
        """Compile the batched graphs now (start-up of a fleet; once): two frames with the same camera count,
        three with different ones (in ``causal_text`` a graph each). Returns the seconds it took."""
        if self._compiled is None or self.batch_compile_s is not None:
            return 0.0
        images, k, tokens = self._blank()
        slots = images.shape[0]
        masks = [torch.ones(slots, dtype=torch.bool), torch.arange(slots) == 0]
        n = [min(m, len(tokens)) for m in (9, 6, 4)]
        ks = [k.clone() for _ in range(3)]

        def calls() -> None:
            self.prefill_batch([(images, masks[0], tokens[: n[0]]), (images, masks[0], tokens[: n[1]])], ks[:2], ks[:2])
            self.prefill_batch([(images, masks[i % 2], tokens[: n[i]]) for i in range(3)], ks, ks)

        self.batch_compile_s = self._timed_warm_up(calls, "batched prefill")
        return self.batch_compile_s


def _compilable_batch(frames: Sequence[PrefixFrame]) -> bool:
    """Whether a batch's sizes stay clear of Dynamo's 0/1 specialization: some camera, a prompt of 2 or more."""
    return any(bool(mask.any()) for _, mask, _ in frames) and max(tokens.numel() for _, _, tokens in frames) >= 2


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
