"""One prefill over several frames' prefixes of different lengths: the robots of a fleet due on one tick.

Each prefix is its valid images' tokens then its prompt, as :meth:`Pi05Model.prefill` builds it; prefixes are
ragged in both (cameras masked out, prompts of different lengths). The vision tower runs once over every valid
image of the batch (it attends within each image). The backbone runs on the prefixes right-padded to the
longest: row b holds prefix b at positions 0..T_b-1 (its own RoPE positions, as alone), and attention hides
every row's padding as keys from every query (``prefix_attention.ragged_masks``), so the keys and values
written for prefix b equal its own prefill's up to float rounding (the padded rows' work is spent, not read).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from oxygen_ros.model.network.layers import apply_rope
from oxygen_ros.model.network.mot import NO_MODULATION, ExpertBlock
from oxygen_ros.model.network.prefix_attention import folded_sdpa, ragged_masks, ragged_prefix_attention
from oxygen_ros.model.network.vision import SiglipBlock, block_on_rows
from oxygen_ros.model.network.vla import Pi05Model, PrefixOutput

# One frame's inputs: images [slots, 3, S, S], image_mask [slots] bool, prompt tokens [n].
PrefixFrame = tuple[Tensor, Tensor, Tensor]


def ragged_layer(block: ExpertBlock, x: Tensor, cos: Tensor, sin: Tensor, rows: Tensor,
                 causal_text: bool) -> tuple[Tensor, Tensor, Tensor]:
    """One backbone layer over a padded batch x [B, T, W] → (x, k, v); ``rows`` as in :class:`RaggedMasks`."""
    q, k, v, _ = block.pre_attention(x, NO_MODULATION)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    return block.post_attention(x, ragged_prefix_attention(q, k, v, rows, causal_text), None, NO_MODULATION), k, v


def ragged_last_layer(block: ExpertBlock, x: Tensor, cos: Tensor, sin: Tensor, last: Tensor,
                      keys: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The final layer: keys and values of every slot, the output [B, 1, W] of each row's last token only
    (``last`` [B]: its index; ``keys`` [B, 1, 1, T]: each row's own slots)."""
    q, k, v, _ = block.pre_attention(x, NO_MODULATION)
    rows = torch.arange(x.shape[0], device=x.device)
    q = apply_rope(q[rows, last].unsqueeze(1), cos[0, last].unsqueeze(1), sin[0, last].unsqueeze(1))
    k = apply_rope(k, cos, sin)
    attn = folded_sdpa(q, k, v, keys)
    return block.post_attention(x[rows, last].unsqueeze(1), attn, None, NO_MODULATION), k, v


@dataclass(frozen=True)
class BatchLayers:
    """How :func:`prefill_batch` runs its layers: these functions, or their compiled forms
    (``compiled_prefill.FusedPrefill``)."""

    vision: Callable[[SiglipBlock, Tensor], Tensor] = block_on_rows
    backbone: Callable[..., tuple[Tensor, Tensor, Tensor]] = ragged_layer
    last: Callable[..., tuple[Tensor, Tensor, Tensor]] = ragged_last_layer


EAGER_BATCH_LAYERS = BatchLayers()


@torch.inference_mode()
def prefill_batch(model: Pi05Model, frames: Sequence[PrefixFrame], k_outs: Sequence[Tensor],
                  v_outs: Sequence[Tensor], layers: BatchLayers | None = None) -> list[PrefixOutput]:
    """Prefill B frames in one batched call; frame b's KV goes into k_outs[b]/v_outs[b] [L, ≥T_b, Hkv, D]
    (typically views of its own extent of the KV pool). Returns each frame's :class:`PrefixOutput`."""
    if not frames or len(k_outs) != len(frames) or len(v_outs) != len(frames):
        raise ValueError(f"{len(frames)} frames for {len(k_outs)} key and {len(v_outs)} value destinations")
    run = layers or EAGER_BATCH_LAYERS
    inputs = [model.prefix_inputs(*frame) for frame in frames]  # validates each frame as the one-frame path does
    n_img = [patches.shape[0] for patches, _ in inputs]  # one token per patch
    lengths = [n + text.shape[1] for n, (_, text) in zip(n_img, inputs)]
    for k_out, t in zip(k_outs, lengths):
        if k_out.shape[1] < t:
            raise ValueError(f"KV destination holds {k_out.shape[1]} tokens; the prefix has {t}")
    x = _padded_embeddings(model, inputs, lengths, run.vision)
    t_max, device = x.shape[1], x.device
    cos, sin = model.rope.cos_sin(torch.arange(t_max, device=device).unsqueeze(0), model.dtype)
    b = model.config.backbone
    masks = ragged_masks(n_img, lengths, model.config.prefix_attention == "causal_text",
                         b.num_heads // b.num_kv_heads, device)
    last = torch.tensor(lengths, device=device) - 1
    for i, layer in enumerate(model.layers):
        if i < len(model.layers) - 1:
            x, k, v = run.backbone(layer.vlm, x, cos, sin, masks.rows, masks.causal_text)
        else:
            x, k, v = run.last(layer.vlm, x, cos, sin, last, masks.keys)
        for row, t in enumerate(lengths):
            k_outs[row][i, :t].copy_(k[row, :t])
            v_outs[row][i, :t].copy_(v[row, :t])
    hidden, _ = model.norm(x[:, 0])
    return [PrefixOutput(length=t, num_image_tokens=n, last_hidden=hidden[row])
            for row, (t, n) in enumerate(zip(lengths, n_img))]


def _padded_embeddings(model: Pi05Model, inputs: Sequence[tuple[Tensor, Tensor]], lengths: Sequence[int],
                       vision: Callable[[SiglipBlock, Tensor], Tensor]) -> Tensor:
    """Each frame's image tokens then its embedded prompt, right-padded with zeros → [B, T_max, W]."""
    texts = [text[0] for _, text in inputs]
    x = texts[0].new_zeros(len(inputs), max(lengths), texts[0].shape[-1])
    patches = [p for p, _ in inputs if p.shape[0]]
    images = model.image_tokens(torch.cat(patches), vision)[0] if patches else None  # every valid image in one call
    start = 0
    for row, ((p, _), text) in enumerate(zip(inputs, texts)):
        n = p.shape[0]
        if n:
            x[row, :n] = images[start:start + n]  # type: ignore[index]
            start += n
        x[row, n:n + text.shape[0]] = text
    return x
