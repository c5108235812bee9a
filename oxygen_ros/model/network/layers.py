"""Gemma building blocks: RMSNorm (plain and adaptive), GeGLU MLP, rotary embeddings, attention math.

The numerics follow transformers' Gemma (norms in float32, ``x * (1 + w)``, tanh-GELU, rotate-half RoPE)
so the backbone can be checked against ``GemmaForCausalLM`` on identical weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oxygen_ros.model.network.cpu_scores import ONEDNN, float32_scores
from oxygen_ros.model.network.packed_decode import PackedLinear


class RMSNorm(nn.Module):
    """Gemma RMSNorm: ``x / rms(x) * (1 + weight)``, with float32 statistics (torch's fused rms_norm)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor, modulation: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        if self.weight.dtype != x.dtype:  # a float32 island in a bf16 model: all in float32, as transformers' Gemma
            return F.rms_norm(x.float(), (x.shape[-1],), 1.0 + self.weight.float(), self.eps).to(x.dtype), None
        return F.rms_norm(x, (x.shape[-1],), 1.0 + self.weight, self.eps), None


class AdaRMSNorm(nn.Module):
    """pi0.5's adaptive RMSNorm: a dense layer of the condition gives (scale, shift, gate).

    Output is ``x̂ · (1 + scale) + shift``; the gate multiplies the residual branch it precedes. ``forward``
    takes the modulation ``dense(cond)`` rather than the condition, so a caller that knows the flow times in
    advance can compute every norm's modulation for every step in one matrix product.
    """

    def __init__(self, dim: int, cond_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.dense = nn.Linear(cond_dim, 3 * dim)

    def forward(self, x: Tensor, modulation: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        if modulation is None:
            raise ValueError("AdaRMSNorm needs the modulation of the flow-matching time condition")
        normed = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps)
        scale, shift, gate = modulation.float().unsqueeze(-2).chunk(3, dim=-1)
        return (normed * (1.0 + scale) + shift).to(x.dtype), gate.to(x.dtype)


class GeGLU(nn.Module):
    """Gemma MLP: ``down(gelu_tanh(gate(x)) * up(x))``."""

    def __init__(self, width: int, mlp_dim: int) -> None:
        super().__init__()
        self.gate_proj = PackedLinear(width, mlp_dim, bias=False)
        self.up_proj = PackedLinear(width, mlp_dim, bias=False)
        self.down_proj = PackedLinear(mlp_dim, width, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(gelu_tanh(self.gate_proj(x)) * self.up_proj(x))


def gelu_tanh(x: Tensor) -> Tensor:
    """The tanh-approximated GELU of Gemma and SigLIP (``gelu_pytorch_tanh``).

    In a graph compiled for the CPU it is written as ``x · sigmoid(2u)``, u = √(2/π)·(x + 0.044715·x³), in
    float32. That is the same function (½·(1 + tanh u) = sigmoid(2u)), no further from a float64 reference
    than torch's own float32 tanh form (``test_compiled_prefill``), and 2.8x faster in inductor's C++, whose
    vectorized tanh costs far more than its exp (525 x 2048 bfloat16, one thread: 1.5 against 0.53 ms;
    docs/performance.md). Eager and CUDA take ``F.gelu``.
    """
    if not (x.device.type == "cpu" and torch.compiler.is_compiling()):
        return F.gelu(x, approximate="tanh")
    xf = x.float()
    return (xf * torch.sigmoid(xf * (1.0 + 0.044715 * xf * xf) * (2.0 * math.sqrt(2.0 / math.pi)))).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Rotate-half RoPE. Frequencies are computed in float32 on every call (cheap) rather than kept in a
    buffer, so casting the model to bfloat16 or building it on the meta device never degrades them."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, theta

    def cos_sin(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``positions`` [..., S] → cos, sin [..., S, head_dim] in ``dtype``."""
        exponent = torch.arange(0, self.head_dim, 2, device=positions.device, dtype=torch.float32) / self.head_dim
        freqs = positions.float().unsqueeze(-1) * (1.0 / self.theta**exponent)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, S, heads, D]; cos/sin [B, S, D]."""
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


_FUSED_MIN_QUERIES = 32


def _fold_heads(q: Tensor, num_kv_heads: int) -> Tensor:
    """q [B, S, H, D] → [B, Hkv, S*G, D]: the G query heads sharing a KV head become rows of one matmul.

    Rows are ordered (token, head), so with one KV head (pi0.5) this is a view, not a copy.
    """
    b, s, h, d = q.shape
    return q.reshape(b, s, num_kv_heads, h // num_kv_heads, d).transpose(1, 2).reshape(b, num_kv_heads, -1, d)


def _unfold_heads(out: Tensor, s: int) -> Tensor:
    """[B, Hkv, S*G, D] → [B, S, H*D] (a view with one KV head)."""
    b, hkv, sg, d = out.shape
    return out.reshape(b, hkv, s, sg // s, d).transpose(1, 2).reshape(b, s, -1)


def folded_mask_bias(mask: Tensor, group: int) -> Tensor:
    """Bool mask [B, S, T] → additive float32 bias [B, 1, S*G, T] (0 visible, -inf hidden) in the folded
    query layout. Built once per model call and added to every layer's scores."""
    b, s, t = mask.shape
    visible = mask.unsqueeze(2).expand(b, s, group, t).reshape(b, 1, s * group, t)
    return torch.zeros(visible.shape, dtype=torch.float32, device=mask.device).masked_fill_(~visible, float("-inf"))


def _scores(q: Tensor, k: Tensor, bias: Tensor | None) -> Tensor:
    """Float32 scaled scores of folded queries against k [B, T, Hkv, D], plus an additive mask bias."""
    scores = torch.matmul(q, k.permute(0, 2, 3, 1)).float() * (1.0 / math.sqrt(k.shape[-1]))
    return scores if bias is None else scores + bias


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None = None) -> Tensor:
    """Grouped-query attention.

    q [B, S, H, D]; k, v [B, T, Hkv, D]; mask [B, S, T] bool (True = may attend) → [B, S, H*D]. Long query
    blocks (a prefill) use the fused kernel; short ones (decoding: one query per row) fold the query heads
    of each KV head into one matrix product, which on CPU beats the fused kernel there (measured: ~20x).
    ``bias`` is ``folded_mask_bias(mask, H // Hkv)`` when the caller has it already (one per call, not per layer).
    """
    b, s, h, d = q.shape
    hkv = k.shape[2]
    if s >= _FUSED_MIN_QUERIES:
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
            attn_mask=None if mask is None else mask.unsqueeze(1), scale=1.0 / math.sqrt(d), enable_gqa=hkv != h,
        )
        return out.transpose(1, 2).reshape(b, s, h * d)
    if bias is None and mask is not None:
        bias = folded_mask_bias(mask, h // hkv)
    probs = torch.softmax(_scores(_fold_heads(q, hkv), k, bias), dim=-1).to(q.dtype)
    return _unfold_heads(torch.matmul(probs, v.transpose(1, 2)), s)


def attend_two_parts(q: Tensor, k1: Tensor, v1: Tensor, k2: Tensor, v2: Tensor, bias1: Tensor | None = None) -> Tensor:
    """Attention over the union of two key sets without concatenating them.

    Used by the action expert: part 1 is the frame's cached prefix (read in place, never copied), part 2 the
    action tokens themselves (all visible to each other). One softmax over both score blocks equals attending
    to the concatenation. q [B, S, H, D]; k/v [B, T, Hkv, D] → [B, S, H*D]. ``bias1`` [T1] or [B, 1, 1, T1]
    (0 or -inf) hides slots of part 1 (a prefix padded to a static length, or each row's padding in a batch).
    """
    s, hkv = q.shape[1], k1.shape[2]
    qf = _fold_heads(q, hkv)
    s1 = _scores(qf, k1, bias1)
    probs = torch.softmax(torch.cat((s1, _scores(qf, k2, None)), dim=-1), dim=-1).to(q.dtype)
    t1 = s1.shape[-1]
    out = torch.matmul(probs[..., :t1], v1.transpose(1, 2)) + torch.matmul(probs[..., t1:], v2.transpose(1, 2))
    return _unfold_heads(out, s)


def dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float) -> Tensor:
    """``F.scaled_dot_product_attention`` of q [..., S, D] against k, v [..., T, D] with a bool ``mask``
    (True = may attend) broadcastable to [..., S, T].

    In a graph compiled for the CPU it is written out: float32 scores from one matrix product (oneDNN's where
    torch has it: ``cpu_scores``), the scale, mask and softmax that inductor fuses into one loop, and the
    product with v. At the heads of the bench preset (32 and 64 wide) the CPU's flash-attention kernel runs far below matrix-product speed: a compiled vision
    block took 2.48 ms written out against 2.88 ms with the kernel (one thread; a backbone layer the same
    either way; docs/performance.md, "The prefill against its floor"). The scores stay float32 as in the fused
    kernel. Eager and CUDA take the fused kernel.
    """
    if not (q.device.type == "cpu" and torch.compiler.is_compiling()):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    scores = (float32_scores(q, k) if ONEDNN else torch.matmul(q.float(), k.float().transpose(-1, -2))) * scale
    if mask is not None:  # the lowest finite score, not -inf: a row with no visible key stays finite, not NaN
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.matmul(torch.softmax(scores, dim=-1).to(v.dtype), v)


def sinusoidal_time_embedding(t: Tensor, dim: int, min_period: float = 4e-3, max_period: float = 4.0) -> Tensor:
    """pi0's flow-time embedding: sin/cos at geometrically spaced periods. t [B] → [B, dim] (float32)."""
    if dim % 2:
        raise ValueError("time embedding width must be even")
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    angle = t.double().unsqueeze(-1) * (2.0 * math.pi / period)
    return torch.cat((angle.sin(), angle.cos()), dim=-1).float()
