"""bfloat16 the way the references run it: most weights in bf16, a few numerically sensitive ones in float32.

openpi (``PaliGemmaWithExpertModel.to_bfloat16_for_selected_params``) keeps in float32: SigLIP's patch and
position embeddings, every RMSNorm of both experts (``input_layernorm``, ``post_attention_layernorm``, the final
``model.norm``; for the action expert these are the adaptive norms' dense layers), and, because they live
outside that module and are never cast, the action projections and the time MLP. LeRobot's ``PI05Pytorch``
keeps the same plus the whole vision tower and the multi-modal projector.

The model's forward pass casts at the island borders (see ``Pi05Model`` and ``VisionTower``), so a mixed
model computes what the reference's mixed model computes. Loading puts island tensors straight into float32
from the file (never through bf16), see ``checkpoint.load_checkpoint``.
"""

from __future__ import annotations

import re
from typing import Literal

import torch
from torch import nn

IslandStyle = Literal["openpi", "lerobot", "none"]
ISLAND_STYLES: tuple[str, ...] = ("openpi", "lerobot", "none")

_ALWAYS = ("action_in_proj.", "action_out_proj.", "time_mlp_in.", "time_mlp_out.", "norm.", "action_norm.")
_NORMS = re.compile(r"^layers\.\d+\.(vlm|action)\.(input_layernorm|post_attention_layernorm)\.")
_OPENPI_VISION = ("vision_tower.patch_embedding.", "vision_tower.position_embedding.")
_LEROBOT_VISION = ("vision_tower.", "multi_modal_projector.")


def keeps_float32(name: str, style: IslandStyle) -> bool:
    """Whether parameter ``name`` (our naming) stays float32 in a reduced-precision model of ``style``."""
    if style == "none":
        return False
    if style not in ISLAND_STYLES:
        raise ValueError(f"unknown float32 island style {style!r}; choose one of {list(ISLAND_STYLES)}")
    if name.startswith(_ALWAYS) or _NORMS.match(name):
        return True
    return name.startswith(_OPENPI_VISION if style == "openpi" else _LEROBOT_VISION)


def param_dtype(name: str, dtype: torch.dtype, style: IslandStyle) -> torch.dtype:
    """The dtype parameter ``name`` gets when the model runs in ``dtype``."""
    if dtype == torch.float32 or not dtype.is_floating_point:
        return dtype
    return torch.float32 if keeps_float32(name, style) else dtype


def cast_for_inference(model: nn.Module, dtype: torch.dtype, style: IslandStyle, device: torch.device | str | None = None) -> nn.Module:
    """Move ``model`` to ``device`` and ``dtype`` in place, keeping the float32 islands of ``style`` in float32.

    Call it on a float32 model: an island that went through bf16 already would not get its precision back.
    """
    model.to(device=device)  # buffers too; parameters get their dtype one by one
    for name, param in model.named_parameters():
        param.data = param.data.to(dtype=param_dtype(name, dtype, style))
    return model


def float32_names(model: nn.Module) -> list[str]:
    """Parameters held in float32 (for logs and tests)."""
    return [n for n, p in model.named_parameters() if p.dtype == torch.float32]
