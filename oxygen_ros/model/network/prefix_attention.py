"""Attention over a frame's prefix by its structure, not through a dense boolean mask.

The prefix is ``n_img`` image tokens then the prompt. Image tokens attend to all image tokens; prompt tokens
attend to every image token and causally to the prompt (``causal_text``, OxyGen), or everything attends to
everything (``bidirectional``, openpi). So the image block needs no mask at all and only the few prompt rows
need one: one fused-attention call per block instead of one over a [T, T] mask. With one KV head (pi0.5)
the query heads fold into rows of a single head, so the kernel sees no grouped-query broadcast either
(measured on a CPU, ``python -m oxygen_ros.bench.probes.prefix_attention``: see docs/performance.md).

A batch of prefixes of different lengths (``ragged_masks``, ``ragged_prefix_attention``: several robots'
frames in one prefill) keeps that structure where the batch shares it and adds each row's padding mask.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from oxygen_ros.model.network.layers import _fold_heads, _unfold_heads, dot_product_attention


def folded_sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """q [B, S, H, D]; k, v [B, T, Hkv, D]; mask [S·G, T] bool in the folded row order (token, head), one per
    batch row [B, 1, S·G or 1, T], or None → [B, S, H·D]."""
    s, hkv, d = q.shape[1], k.shape[2], q.shape[3]
    out = dot_product_attention(_fold_heads(q, hkv), k.transpose(1, 2), v.transpose(1, 2), mask, 1.0 / math.sqrt(d))
    return _unfold_heads(out, s)


def text_rows_mask(n_img: int, n_txt: int, group: int, device: torch.device) -> Tensor:
    """[n_txt·G, n_img + n_txt] bool: prompt token i (its G folded head rows) sees the images and prompt ≤ i."""
    token = torch.arange(n_txt * group, device=device) // group
    return torch.arange(n_img + n_txt, device=device).unsqueeze(0) <= (token + n_img).unsqueeze(1)


def prefix_attention(q: Tensor, k: Tensor, v: Tensor, text_mask: Tensor | None) -> Tensor:
    """q [B, T, H, D]; k, v [B, T, Hkv, D] over a whole prefix (images first) → [B, T, H·D].

    ``text_mask`` (``text_rows_mask``) makes the prompt causal (``causal_text``); None: all see all
    (``bidirectional``). The image count comes from the shapes (T minus the mask's prompt tokens), so a
    compiled caller sees it as a size, not a constant to specialize on.
    """
    if text_mask is None:
        return folded_sdpa(q, k, v)
    n_img = q.shape[1] - text_mask.shape[0] // (q.shape[2] // k.shape[2])
    text = folded_sdpa(q[:, n_img:], k, v, text_mask)
    if not n_img:
        return text
    images = folded_sdpa(q[:, :n_img], k[:, :n_img], v[:, :n_img])
    return torch.cat((images, text), dim=1)


def last_token_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The prefix's last token (a prompt token: it sees the whole prefix in both modes). q [B, 1, H, D]."""
    return folded_sdpa(q, k, v)


@dataclass(frozen=True)
class RaggedMasks:
    """Which keys each query of a right-padded batch of prefixes may see (``ragged_masks``).

    Tensors only (and a mode flag), so a compiled layer takes them as inputs of dynamic size: the rows that
    need no mask (image rows common to every prefix) follow from the shapes, never from a Python int."""

    rows: Tensor  # causal_text: [B, 1, S·G, T] bool for the last S rows (folded: token, head); else = keys
    keys: Tensor  # [B, 1, 1, T] bool: each prefix's own slots (what its last token sees)
    causal_text: bool


def ragged_masks(n_img: Sequence[int], lengths: Sequence[int], causal_text: bool, group: int,
                 device: torch.device) -> RaggedMasks:
    """Masks for B prefixes of ``n_img[b]`` image tokens then a prompt, ``lengths[b]`` tokens in all, right-padded
    to the longest. Every row's padding is hidden as keys from every query; padded query rows see their row's
    own slots (their outputs are never read, but stay finite). ``bidirectional``: that is all. ``causal_text``:
    image tokens see their images, prompt token i the images and the prompt ≤ i, as ``prefix_attention``.
    Where every prefix has the same image count the image rows need no mask, as in one prefix alone."""
    b, t = len(lengths), max(lengths)
    key = torch.arange(t, device=device).view(1, 1, t)
    valid = key < torch.tensor(lengths, device=device).view(b, 1, 1)  # [B, 1, T]
    keys = valid.unsqueeze(1)
    if not causal_text:
        return RaggedMasks(keys, keys, False)
    common = n_img[0] if len(set(n_img)) == 1 else 0
    query = torch.arange(common, t, device=device).view(1, -1, 1)
    images = torch.tensor(n_img, device=device).view(b, 1, 1)
    sees = valid & ((key < images) | ((query >= images) & (key <= query)))  # [B, S, T]
    s = t - common
    rows = sees.unsqueeze(2).expand(b, s, group, t).reshape(b, 1, s * group, t)
    return RaggedMasks(rows, keys, True)


def ragged_prefix_attention(q: Tensor, k: Tensor, v: Tensor, rows: Tensor, causal_text: bool) -> Tensor:
    """``prefix_attention`` over a right-padded batch of prefixes: q [B, T, H, D]; k, v [B, T, Hkv, D];
    ``rows`` and ``causal_text`` from :class:`RaggedMasks`. In ``causal_text`` the leading T - S rows (the image
    tokens every prefix has) attend with no mask, the others through ``rows``."""
    if not causal_text:
        return folded_sdpa(q, k, v, rows)
    n = q.shape[1] - rows.shape[2] // (q.shape[2] // k.shape[2])
    rest = folded_sdpa(q[:, n:], k, v, rows)
    if not n:
        return rest
    return torch.cat((folded_sdpa(q[:, :n], k[:, :n], v[:, :n]), rest), dim=1)
