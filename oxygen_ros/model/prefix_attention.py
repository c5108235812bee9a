"""Attention over a frame's prefix by its structure, not through a dense boolean mask.

The prefix is ``n_img`` image tokens then the prompt. Image tokens attend to all image tokens; prompt tokens
attend to every image token and causally to the prompt (``causal_text``, OxyGen), or everything attends to
everything (``bidirectional``, openpi). So the image block needs no mask at all and only the few prompt rows
need one: one fused-attention call per block instead of one over a [T, T] mask. With one KV head (pi0.5)
the query heads fold into rows of a single head, so the kernel sees no grouped-query broadcast either
(measured on a CPU, ``python -m oxygen_ros.bench.prefix_attention``: see docs/performance.md).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .layers import _fold_heads, _unfold_heads


def folded_sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """q [B, S, H, D]; k, v [B, T, Hkv, D]; mask [S·G, T] bool in the folded row order (token, head) or None
    → [B, S, H·D]."""
    s, hkv, d = q.shape[1], k.shape[2], q.shape[3]
    out = F.scaled_dot_product_attention(
        _fold_heads(q, hkv), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=1.0 / math.sqrt(d)
    )
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
