"""Model configuration: the pi0.5 shape, small presets for tests and the CPU benchmark, and YAML/JSON files.

All sizes live here; nothing else in the model hard-codes a width or depth.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

PrefixAttention = Literal["bidirectional", "causal_text"]


@dataclass(frozen=True)
class VisionConfig:
    """A SigLIP-style vision tower (ViT with learned position embeddings, no pooling head)."""

    width: int = 1152
    depth: int = 27
    num_heads: int = 16
    mlp_dim: int = 4304
    patch_size: int = 14
    image_size: int = 224
    layer_norm_eps: float = 1e-6

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class ExpertConfig:
    """One Gemma-style transformer stack (an "expert" of the Mixture-of-Transformers)."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int = 8
    num_kv_heads: int = 1
    head_dim: int = 256
    rms_norm_eps: float = 1e-6


@dataclass(frozen=True)
class ModelConfig:
    """The whole pi0.5 model: vision tower, VLM backbone, action expert and the flow-matching head."""

    vision: VisionConfig = field(default_factory=VisionConfig)
    backbone: ExpertConfig = field(default_factory=lambda: ExpertConfig(width=2048, depth=18, mlp_dim=16384))
    expert: ExpertConfig = field(default_factory=lambda: ExpertConfig(width=1024, depth=18, mlp_dim=4096))
    vocab_size: int = 257_152
    action_dim: int = 32
    action_horizon: int = 10
    num_denoise_steps: int = 10
    num_image_slots: int = 3
    max_prompt_tokens: int = 200
    prefix_attention: PrefixAttention = "causal_text"
    rope_theta: float = 10_000.0
    # Special token ids of the PaliGemma SentencePiece vocabulary.
    bos_token_id: int = 2
    eos_token_id: int = 1
    pad_token_id: int = 0

    def __post_init__(self) -> None:
        b, e = self.backbone, self.expert
        if b.depth != e.depth:
            raise ValueError(f"backbone depth {b.depth} != expert depth {e.depth}: MoT layers are paired")
        if (b.num_heads, b.num_kv_heads, b.head_dim) != (e.num_heads, e.num_kv_heads, e.head_dim):
            raise ValueError("backbone and action expert must share heads, KV heads and head_dim (joint attention)")
        if b.num_heads % b.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        if self.vision.image_size % self.vision.patch_size:
            raise ValueError("image_size must be a multiple of patch_size")
        if self.prefix_attention not in ("bidirectional", "causal_text"):
            raise ValueError(f"prefix_attention must be 'bidirectional' or 'causal_text', not {self.prefix_attention!r}")
        for name in ("action_dim", "action_horizon", "num_denoise_steps", "num_image_slots", "max_prompt_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")

    @property
    def tokens_per_image(self) -> int:
        return self.vision.num_patches

    @property
    def max_prefix_tokens(self) -> int:
        return self.num_image_slots * self.tokens_per_image + self.max_prompt_tokens

    def kv_bytes_per_token(self, bytes_per_element: int) -> int:
        """KV bytes one token costs across all backbone layers (keys and values)."""
        b = self.backbone
        return 2 * b.depth * b.num_kv_heads * b.head_dim * bytes_per_element

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        """Build from a dict; a ``preset`` key starts from that preset and the other keys override it."""
        data = dict(data)
        base = PRESETS[data.pop("preset")] if "preset" in data else cls()
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown model config keys: {sorted(unknown)}")
        changes: dict[str, Any] = {}
        for key, value in data.items():
            if key == "vision":
                changes[key] = dataclasses.replace(base.vision, **value)
            elif key in ("backbone", "expert"):
                changes[key] = dataclasses.replace(getattr(base, key), **value)
            else:
                changes[key] = value
        return dataclasses.replace(base, **changes)

    @classmethod
    def from_file(cls, path: str | Path) -> "ModelConfig":
        path = Path(path)
        text = path.read_text()
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of model config keys")
        return cls.from_dict(data)


PI05 = ModelConfig()

# Same structure as pi0.5 at a size that runs in milliseconds on a CPU; used by tests and the demo.
TINY = ModelConfig(
    vision=VisionConfig(width=32, depth=2, num_heads=2, mlp_dim=64, patch_size=14, image_size=56),
    backbone=ExpertConfig(width=64, depth=2, mlp_dim=128, num_heads=4, num_kv_heads=1, head_dim=16),
    expert=ExpertConfig(width=32, depth=2, mlp_dim=64, num_heads=4, num_kv_heads=1, head_dim=16),
    vocab_size=512,
    action_dim=8,
    action_horizon=10,
    max_prompt_tokens=96,
)

# Shaped like pi0.5 for the CPU benchmark (oxygen-bench): width 256 backbone with the real 257k vocabulary.
BENCH = ModelConfig(
    vision=VisionConfig(width=192, depth=6, num_heads=3, mlp_dim=768, patch_size=14, image_size=224),
    backbone=ExpertConfig(width=256, depth=18, mlp_dim=2048, num_heads=8, num_kv_heads=1, head_dim=32),
    expert=ExpertConfig(width=128, depth=18, mlp_dim=512, num_heads=8, num_kv_heads=1, head_dim=32),
    vocab_size=257_152,
    action_dim=32,
    action_horizon=10,
    max_prompt_tokens=100,
)

# The trained demo policy (oxygen-train-demo, models/demo): learns the simulator's pick task on 2 CPU cores in
# minutes. Two cameras (base, wrist) at 64x64 in 16x16 patches (16 tokens each: half the step time of 8x8
# patches); openpi's bidirectional prefix (the image tokens see the instruction); action_dim = the simulated
# arm's joints + gripper. 1024 pieces make every word of the data one piece or two: with 384 the answers, notes and
# instructions were spelt letter by letter, the longer sequences cost 1.5x the training step, and the memory
# notes stayed at 0.2-0.4 against 0.85 with the same recipe otherwise (docs/training.md).
DEMO = ModelConfig(
    vision=VisionConfig(width=64, depth=2, num_heads=2, mlp_dim=128, patch_size=16, image_size=64),
    backbone=ExpertConfig(width=128, depth=3, mlp_dim=256, num_heads=4, num_kv_heads=1, head_dim=32),
    expert=ExpertConfig(width=64, depth=3, mlp_dim=128, num_heads=4, num_kv_heads=1, head_dim=32),
    vocab_size=1024,
    action_dim=4,
    action_horizon=10,
    max_prompt_tokens=80,
    prefix_attention="bidirectional",
)

# The trained ALOHA demo policy (oxygen-train-demo --env aloha_transfer_cube, models/aloha): the demo's size in
# openpi's ALOHA layout: three cameras (cam_high, both wrists) at 96x96 (36 patches each: the 4 cm cube is
# about three pixels wide in cam_high at this size, two at 64x64), 14 actions (two arms of six joints and a
# gripper) in chunks of 50 steps at 50 Hz.
ALOHA_DEMO = DEMO.replace(vision=dataclasses.replace(DEMO.vision, image_size=96), action_dim=14, action_horizon=50)

PRESETS: dict[str, ModelConfig] = {"pi05": PI05, "tiny": TINY, "bench": BENCH, "demo": DEMO, "aloha_demo": ALOHA_DEMO}


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}") from None
