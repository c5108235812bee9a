"""The Mixture-of-Transformers layer: two experts (VLM backbone, action expert), one joint attention.

Each expert projects its own tokens to Q/K/V with its own weights; attention runs over the concatenation
of both experts' tokens; each expert applies its own output projection, norms and MLP to its slice. The
action expert's norms are adaptive (conditioned on the flow time) and gate its residual branches.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from oxygen_ros.model.network.config import ExpertConfig
from oxygen_ros.model.network.layers import AdaRMSNorm, GeGLU, RMSNorm, apply_rope, attend
from oxygen_ros.model.network.packed_decode import PackedLinear


# (input norm, post-attention norm) modulations of one block; (None, None) for a plain RMSNorm block.
Modulations = tuple[Tensor | None, Tensor | None]
NO_MODULATION: Modulations = (None, None)


class ExpertAttentionProj(nn.Module):
    def __init__(self, cfg: ExpertConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = PackedLinear(cfg.width, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = PackedLinear(cfg.width, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = PackedLinear(cfg.width, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = PackedLinear(cfg.num_heads * cfg.head_dim, cfg.width, bias=False)

    def qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x [B, S, W] → q [B, S, H, D], k/v [B, S, Hkv, D]."""
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(b, s, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, s, self.num_kv_heads, self.head_dim)
        return q, k, v


class ExpertBlock(nn.Module):
    """One expert's half of a MoT layer. ``cond_dim`` set → adaptive RMSNorm with gated residuals."""

    def __init__(self, cfg: ExpertConfig, cond_dim: int | None = None) -> None:
        super().__init__()
        if cond_dim is None:
            self.input_layernorm: nn.Module = RMSNorm(cfg.width, cfg.rms_norm_eps)
            self.post_attention_layernorm: nn.Module = RMSNorm(cfg.width, cfg.rms_norm_eps)
        else:
            self.input_layernorm = AdaRMSNorm(cfg.width, cond_dim, cfg.rms_norm_eps)
            self.post_attention_layernorm = AdaRMSNorm(cfg.width, cond_dim, cfg.rms_norm_eps)
        self.self_attn = ExpertAttentionProj(cfg)
        self.mlp = GeGLU(cfg.width, cfg.mlp_dim)

    def adaptive_norms(self) -> list[AdaRMSNorm]:
        return [n for n in (self.input_layernorm, self.post_attention_layernorm) if isinstance(n, AdaRMSNorm)]

    def pre_attention(self, x: Tensor, mods: Modulations) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        h, gate = self.input_layernorm(x, mods[0])
        q, k, v = self.self_attn.qkv(h)
        return q, k, v, gate

    def post_attention(self, x: Tensor, attn: Tensor, gate: Tensor | None, mods: Modulations) -> Tensor:
        x = _gated_residual(x, self.self_attn.o_proj(attn), gate)
        h, gate2 = self.post_attention_layernorm(x, mods[1])
        return _gated_residual(x, self.mlp(h), gate2)



def _gated_residual(x: Tensor, y: Tensor, gate: Tensor | None) -> Tensor:
    return x + y if gate is None else x + y * gate


class MoTLayer(nn.Module):
    def __init__(self, backbone: ExpertConfig, expert: ExpertConfig) -> None:
        super().__init__()
        self.vlm = ExpertBlock(backbone)
        self.action = ExpertBlock(expert, cond_dim=expert.width)

    def joint(
        self, xp: Tensor, xs: Tensor, mods: Modulations, cos: Tensor, sin: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Both experts over their tokens with one attention (no cache): backbone tokens xp [B, P, Wb] then
        action tokens xs [B, H, Wa]; cos/sin and mask [B, P+H, P+H] cover the concatenation."""
        qp, kp, vp, _ = self.vlm.pre_attention(xp, NO_MODULATION)
        qs, ks, vs, gate = self.action.pre_attention(xs, mods)
        q = apply_rope(torch.cat((qp, qs), 1), cos, sin)
        k = apply_rope(torch.cat((kp, ks), 1), cos, sin)
        attn = attend(q, k, torch.cat((vp, vs), 1), mask)
        p = xp.shape[1]
        return self.vlm.post_attention(xp, attn[:, :p], None, NO_MODULATION), self.action.post_attention(xs, attn[:, p:], gate, mods)
