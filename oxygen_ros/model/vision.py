"""SigLIP-style vision tower: patchify, learned positions, pre-norm ViT blocks, final LayerNorm, no pooling."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import VisionConfig


class SiglipAttention(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        if cfg.width % cfg.num_heads:
            raise ValueError("vision width must be a multiple of its heads")
        self.num_heads = cfg.num_heads
        self.q_proj = nn.Linear(cfg.width, cfg.width)
        self.k_proj = nn.Linear(cfg.width, cfg.width)
        self.v_proj = nn.Linear(cfg.width, cfg.width)
        self.out_proj = nn.Linear(cfg.width, cfg.width)

    def forward(self, x: Tensor) -> Tensor:
        b, n, w = x.shape
        d = w // self.num_heads

        def heads(t: Tensor) -> Tensor:
            return t.view(b, n, self.num_heads, d).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x)), scale=1.0 / math.sqrt(d)
        )
        return self.out_proj(out.transpose(1, 2).reshape(b, n, w))


class SiglipMLP(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.width, cfg.mlp_dim)
        self.fc2 = nn.Linear(cfg.mlp_dim, cfg.width)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class SiglipBlock(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(cfg.width, eps=cfg.layer_norm_eps)
        self.self_attn = SiglipAttention(cfg)
        self.layer_norm2 = nn.LayerNorm(cfg.width, eps=cfg.layer_norm_eps)
        self.mlp = SiglipMLP(cfg)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class VisionTower(nn.Module):
    """Images [N, 3, S, S] in [-1, 1] → patch features [N, num_patches, width]."""

    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.patch_embedding = nn.Conv2d(3, cfg.width, kernel_size=cfg.patch_size, stride=cfg.patch_size)
        self.position_embedding = nn.Embedding(cfg.num_patches, cfg.width)
        self.layers = nn.ModuleList(SiglipBlock(cfg) for _ in range(cfg.depth))
        self.post_layernorm = nn.LayerNorm(cfg.width, eps=cfg.layer_norm_eps)

    def forward(self, images: Tensor) -> Tensor:
        size = self.cfg.image_size
        if images.dim() != 4 or images.shape[1:] != (3, size, size):
            raise ValueError(f"expected images [N, 3, {size}, {size}], got {tuple(images.shape)}")
        x = self.patch_embedding(images.to(self.patch_embedding.weight.dtype)).flatten(2).transpose(1, 2)
        x = x + self.position_embedding.weight
        # The embeddings may be a float32 island of a bf16 model (precision.py): continue in the blocks' dtype.
        x = x.to(self.post_layernorm.weight.dtype)
        for layer in self.layers:
            x = layer(x)
        return self.post_layernorm(x)
