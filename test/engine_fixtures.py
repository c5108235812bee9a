"""Shared helpers for engine tests: a tiny model, frames, and an independent decode-alone reference."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from oxygen_ros.engine import FrameInput
from oxygen_ros.model.network.config import TINY, ModelConfig
from oxygen_ros.model.network.vla import Pi05Model


def tiny_model(seed: int = 0, **changes) -> Pi05Model:
    torch.manual_seed(seed)
    return Pi05Model(TINY.replace(**changes) if changes else TINY).eval()


def model_with_norms(prefix_attention: str = "causal_text", seed: int = 0) -> Pi05Model:
    """A tiny model whose norm weights are not trivial (zeros would hide a norm applied wrongly)."""
    model = tiny_model(seed, prefix_attention=prefix_attention)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("layernorm.weight", "layer_norm1.weight")) or name == "norm.weight":
                p.normal_(0.0, 0.3)
    return model


def make_frame(cfg: ModelConfig, seq: int, prompt_len: int = 6, cameras: tuple[bool, ...] = (True, False, True)) -> FrameInput:
    g = torch.Generator().manual_seed(1000 + seq)
    s = cfg.vision.image_size
    images = torch.rand(cfg.num_image_slots, 3, s, s, generator=g) * 2 - 1
    tokens = torch.randint(4, cfg.vocab_size, (prompt_len + seq % 3,), generator=g)
    tokens[0] = cfg.bos_token_id
    return FrameInput(images, torch.tensor(cameras), tokens, stamp_ns=seq * 100_000_000, frame_seq=seq)


def decode_alone(model: Pi05Model, frame: FrameInput, continuation: list[int], n: int, eos: int | None = None) -> list[int]:
    """Greedy decoding of one request with private contiguous buffers and no KV manager at all."""
    b = model.config.backbone
    cap = 2000
    k = torch.zeros(b.depth, cap, b.num_kv_heads, b.head_dim, dtype=model.dtype)
    v = torch.zeros_like(k)
    out = model.prefill(frame.images, frame.image_mask, frame.prompt_tokens, k, v)
    length = out.length

    def feed(tokens: list[int]) -> torch.Tensor:
        nonlocal length
        new = len(tokens)
        total = length + new
        plan = SimpleNamespace(
            ctx_index=torch.arange(total).unsqueeze(0),
            ctx_len=torch.tensor([total]),
            write_index=torch.arange(length, total).unsqueeze(0),
            positions=torch.arange(length, total).unsqueeze(0),
        )
        length = total
        return model.extend(torch.tensor([tokens]), plan, k, v)

    hidden = feed(continuation)
    generated: list[int] = []
    while len(generated) < n:
        token = int(model.greedy_tokens(hidden)[0])
        generated.append(token)
        if token == eos:
            break
        hidden = feed([token])
    return generated
