"""How each checkpoint layout names things: weight keys and ``config.json`` fields.

Three layouts hold the same pi0.5 weights:

* ``oxygen``: our own parameter names (``Pi05Model.state_dict()``) and ``ModelConfig.to_dict()``.
* ``openpi``: openpi's PyTorch ``PI0Pytorch`` (written by ``examples/convert_jax_model_to_pytorch.py`` or
  ``scripts/train_pytorch.py``): HF PaliGemma + Gemma module names under ``paligemma_with_expert.``, and a
  small ``config.json`` (action_dim, action_horizon, paligemma_variant, action_expert_variant, precision).
* ``lerobot``: LeRobot's ``PI05Policy``: openpi's names behind a ``model.`` prefix, and a draccus-encoded
  ``PI05Config`` (``"type": "pi05"``, chunk_size, max_action_dim, num_inference_steps, ...).

Both real layouts are written with ``safetensors.torch.save_model``, which stores a tied tensor once under its
alphabetically first name: the PaliGemma embedding therefore usually appears as ``paligemma.lm_head.weight``
rather than ``...language_model.embed_tokens.weight``. The action expert's ``lm_head`` is never used.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Literal, Mapping

from oxygen_ros.model.network.config import ExpertConfig, ModelConfig, VisionConfig

Layout = Literal["openpi", "lerobot", "oxygen"]
LAYOUTS: tuple[Layout, ...] = ("openpi", "lerobot", "oxygen")

_PG = "paligemma_with_expert.paligemma."
_EX = "paligemma_with_expert.gemma_expert."

# The PaliGemma embedding as tied LM head (external name, openpi spelling).
TIED_LM_HEAD = _PG + "lm_head.weight"
# Our name for a text head stored apart from the embedding (``Pi05Model.untie_text_head``).
NATIVE_LM_HEAD = "lm_head.weight"
# Present in real files, never read by pi0.5: the expert's LM head (tied to an embedding it does not have).
EXPERT_LM_HEAD = _EX + "lm_head.weight"

# (our prefix, openpi prefix); "{i}" stands for a layer index. The first matching rule wins.
_PREFIX_RULES: tuple[tuple[str, str], ...] = (
    ("vision_tower.patch_embedding.", _PG + "model.vision_tower.vision_model.embeddings.patch_embedding."),
    ("vision_tower.position_embedding.", _PG + "model.vision_tower.vision_model.embeddings.position_embedding."),
    ("vision_tower.layers.{i}.", _PG + "model.vision_tower.vision_model.encoder.layers.{i}."),
    ("vision_tower.post_layernorm.", _PG + "model.vision_tower.vision_model.post_layernorm."),
    ("multi_modal_projector.", _PG + "model.multi_modal_projector.linear."),
    ("embed_tokens.", _PG + "model.language_model.embed_tokens."),
    ("layers.{i}.vlm.", _PG + "model.language_model.layers.{i}."),
    ("norm.", _PG + "model.language_model.norm."),
    ("layers.{i}.action.", _EX + "model.layers.{i}."),
    ("action_norm.", _EX + "model.norm."),
    ("action_in_proj.", "action_in_proj."),
    ("action_out_proj.", "action_out_proj."),
    ("time_mlp_in.", "time_mlp_in."),
    ("time_mlp_out.", "time_mlp_out."),
)

_VT = _PG + "model.vision_tower."
# Other spellings, rewritten to openpi's before mapping (each rule applies at most once, in order):
# transformers < 4.52 PaliGemma module paths; recent transformers 5 SiglipVisionModel without the
# ``vision_model`` level; the pi0 time-MLP names that LeRobot's loader also renames.
_ALIASES: tuple[tuple[str, str], ...] = (
    (_PG + "language_model.model.", _PG + "model.language_model."),
    (_PG + "language_model.lm_head.", _PG + "lm_head."),
    (_PG + "vision_tower.", _VT),
    (_PG + "multi_modal_projector.", _PG + "model.multi_modal_projector."),
    (_VT + "embeddings.", _VT + "vision_model.embeddings."),
    (_VT + "encoder.", _VT + "vision_model.encoder."),
    (_VT + "post_layernorm.", _VT + "vision_model.post_layernorm."),
    ("action_time_mlp_in.", "time_mlp_in."),
    ("action_time_mlp_out.", "time_mlp_out."),
)

# Derived, non-learned tensors some exporters include; safe to skip.
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq", ".rotary_emb.original_inv_freq", ".embeddings.position_ids")
_IGNORED_KEYS = frozenset({EXPERT_LM_HEAD, _EX + "model.embed_tokens.weight"})

# A key only pi0 (not pi0.5) checkpoints have (pi0 feeds the state through it into the suffix).
PI0_MARKERS = ("state_proj.weight",)


def _compile(prefix: str) -> re.Pattern[str]:
    return re.compile(re.escape(prefix).replace(re.escape("{i}"), r"(\d+)"))


_RULES = tuple((_compile(ours), ours, _compile(theirs), theirs) for ours, theirs in _PREFIX_RULES)


def _rewrite(key: str, pattern: re.Pattern[str], template: str) -> str | None:
    match = pattern.match(key)
    if match is None:
        return None
    head = template.replace("{i}", match.group(1)) if match.groups() else template
    return head + key[match.end() :]


def to_external(key: str, layout: Layout) -> str:
    """Our parameter name → its name in ``layout``."""
    if layout == "oxygen":
        return key
    for ours, _, _, theirs in _RULES:
        name = _rewrite(key, ours, theirs)
        if name is not None:
            return "model." + name if layout == "lerobot" else name
    raise KeyError(f"no {layout} name for parameter {key!r}")


KeyKind = Literal["param", "tied_lm_head", "ignored", "unknown"]


@dataclass(frozen=True)
class KeyMatch:
    kind: KeyKind
    native: str | None = None  # our name, for kind "param" (and "tied_lm_head": the embedding)


def to_native(key: str, layout: Layout) -> KeyMatch:
    """A checkpoint key in ``layout`` → what it is for us (a parameter, the tied LM head, ignored, unknown)."""
    if layout == "oxygen":
        return KeyMatch("tied_lm_head", "embed_tokens.weight") if key == NATIVE_LM_HEAD else KeyMatch("param", key)
    name = key
    if layout == "lerobot" and name.startswith("model."):  # LeRobot itself accepts keys without the prefix
        name = name[len("model.") :]
    for old, new in _ALIASES:
        if name.startswith(old):
            name = new + name[len(old) :]
    if name == TIED_LM_HEAD:
        return KeyMatch("tied_lm_head", "embed_tokens.weight")
    if name in _IGNORED_KEYS or name.endswith(_IGNORED_SUFFIXES):
        return KeyMatch("ignored")
    for _, ours, theirs, _ in _RULES:
        native = _rewrite(name, theirs, ours)
        if native is not None:
            return KeyMatch("param", native)
    return KeyMatch("unknown")


# ------------------------------------------------------------------------------------------- config.json
def layout_of(data: dict[str, Any]) -> Layout:
    """Which tool wrote a ``config.json`` (parsed)."""
    if "type" in data:
        return "lerobot"
    if isinstance(data.get("backbone"), dict) and isinstance(data.get("expert"), dict):
        return "oxygen"
    if any(k in data for k in ("paligemma_variant", "action_expert_variant", "action_horizon")):
        return "openpi"
    raise ValueError(
        "cannot tell the checkpoint layout (no 'type' as LeRobot writes, no 'backbone'/'expert' as "
        "oxygen_ros writes, no 'paligemma_variant'/'action_horizon' as openpi writes)"
    )


def merge_config(base: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``ModelConfig.from_dict`` mappings: ``changes`` over ``base``, nested sections merged key by key."""
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def config_diff(full: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """What ``merge_config(base, diff)`` needs to give ``full``."""
    out: dict[str, Any] = {}
    for key, value in full.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            sub = {k: v for k, v in value.items() if base[key].get(k) != v}
            if sub:
                out[key] = sub
        elif base.get(key) != value:
            out[key] = value
    return out


# openpi src/openpi/models/gemma.py get_config (LoRA variants have the same shapes).
VARIANTS: dict[str, ExpertConfig] = {
    "gemma_2b": ExpertConfig(width=2048, depth=18, mlp_dim=16_384, num_heads=8, num_kv_heads=1, head_dim=256),
    "gemma_300m": ExpertConfig(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256),
    "dummy": ExpertConfig(width=64, depth=4, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16),
}
LEROBOT_VARIANTS = ("gemma_2b", "gemma_300m")  # what PI05Config.__post_init__ accepts
PALIGEMMA_VOCAB = 257_152
# openpi's camera slots, in prefix order (pi0_config.inputs_spec).
OPENPI_CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
LEROBOT_IMAGE_PREFIX = "observation.images."


VARIANT_FIELDS = {"backbone": "paligemma_variant", "expert": "action_expert_variant"}
_DEFAULT_VARIANTS = {"backbone": "gemma_2b", "expert": "gemma_300m"}


def unknown_variants(data: dict[str, Any]) -> list[str]:
    """The sections ("backbone", "expert") whose variant name in a real config.json the package does not know."""
    out = []
    for section, field in VARIANT_FIELDS.items():
        name = data.get(field, _DEFAULT_VARIANTS[section])
        if isinstance(name, str) and name.removesuffix("_lora") not in VARIANTS:
            out.append(section)
    return out


def _variant(data: dict[str, Any], section: str, unknown_ok: bool) -> dict[str, Any]:
    field = VARIANT_FIELDS[section]
    name = data.get(field, _DEFAULT_VARIANTS[section])
    if not isinstance(name, str):
        raise ValueError(f"{field} must be a string, got {name!r}")
    base = name.removesuffix("_lora")
    if base not in VARIANTS:
        if not unknown_ok:
            raise ValueError(f"unknown {field} {name!r}; known: {sorted(VARIANTS)}")
        base = _DEFAULT_VARIANTS[section]  # a placeholder: the caller takes the sizes from the tensors
    return asdict(VARIANTS[base])


def _positive_int(data: dict[str, Any], key: str) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")
    return value


def _pi05_defaults() -> dict[str, Any]:
    """The real pi0.5 shapes, with the prefix attention both openpi and LeRobot train with."""
    out: dict[str, Any] = asdict(ModelConfig())
    out.update(
        vision=asdict(VisionConfig()),
        backbone=asdict(VARIANTS["gemma_2b"]),
        expert=asdict(VARIANTS["gemma_300m"]),
        vocab_size=PALIGEMMA_VOCAB,
        action_horizon=50,  # Pi0Config / PI05Config default
        prefix_attention="bidirectional",
    )
    return out


def config_from_openpi(data: dict[str, Any], unknown_ok: bool = False) -> dict[str, Any]:
    """openpi ``config.json`` → a full ``ModelConfig.from_dict`` mapping."""
    out = _pi05_defaults()
    out["backbone"] = _variant(data, "backbone", unknown_ok)
    out["expert"] = _variant(data, "expert", unknown_ok)
    for ours, theirs in (("action_dim", "action_dim"), ("action_horizon", "action_horizon")):
        if theirs in data:
            out[ours] = _positive_int(data, theirs)
    if "max_token_len" in data:  # not written by openpi's converter, but it is the Pi0Config field
        out["max_prompt_tokens"] = _positive_int(data, "max_token_len")
    return out


def config_from_lerobot(data: dict[str, Any], unknown_ok: bool = False) -> dict[str, Any]:
    """LeRobot ``PI05Config`` JSON → a full ``ModelConfig.from_dict`` mapping."""
    if data.get("type") != "pi05":
        raise ValueError(f"LeRobot policy type {data.get('type')!r} is not supported (only 'pi05')")
    for flag in ("use_visual_memory", "use_proprioceptive_memory"):
        if data.get(flag):
            raise ValueError(f"{flag}=true (LeRobot MEM) is not supported")
    out = _pi05_defaults()
    out["backbone"] = _variant(data, "backbone", unknown_ok)
    out["expert"] = _variant(data, "expert", unknown_ok)
    for ours, theirs in (
        ("action_dim", "max_action_dim"),
        ("action_horizon", "chunk_size"),
        ("num_denoise_steps", "num_inference_steps"),
        ("max_prompt_tokens", "tokenizer_max_length"),
    ):
        if theirs in data:
            out[ours] = _positive_int(data, theirs)
    if "image_resolution" in data:
        res = data["image_resolution"]
        if not (isinstance(res, list) and len(res) == 2 and res[0] == res[1] and isinstance(res[0], int)):
            raise ValueError(f"image_resolution must be a square [size, size], got {res!r}")
        out["vision"]["image_size"] = res[0]
    cameras = lerobot_cameras(data)
    if cameras:
        out["num_image_slots"] = len(cameras)
    return out


def lerobot_cameras(data: dict[str, Any]) -> list[str]:
    """The VISUAL input features (one prefix image slot each), plus empty cameras not yet listed."""
    features = data.get("input_features") or {}
    if not isinstance(features, dict):
        raise ValueError("input_features must be a mapping")
    cams = [k for k, v in features.items() if isinstance(v, dict) and v.get("type") == "VISUAL"]
    empty = data.get("empty_cameras", 0)
    if isinstance(empty, int) and not isinstance(empty, bool):
        cams += [n for i in range(empty) if (n := f"{LEROBOT_IMAGE_PREFIX}empty_camera_{i}") not in cams]
    return cams


def variant_name(cfg: ExpertConfig, default: str, allowed: tuple[str, ...] = tuple(VARIANTS)) -> str:
    """The variant name with ``cfg``'s shape, or ``default`` (the true shape then goes in the sidecar)."""
    for name in allowed:
        if asdict(VARIANTS[name]) == asdict(cfg):
            return name
    return default


def openpi_config_json(cfg: ModelConfig, precision: str) -> dict[str, Any]:
    """The fields openpi's converter writes."""
    return {
        "action_dim": cfg.action_dim,
        "action_horizon": cfg.action_horizon,
        "paligemma_variant": variant_name(cfg.backbone, "gemma_2b"),
        "action_expert_variant": variant_name(cfg.expert, "gemma_300m"),
        "precision": precision,
    }


def lerobot_config_json(cfg: ModelConfig, precision: str) -> dict[str, Any]:
    """A ``PI05Config`` that LeRobot's draccus decoder accepts (fields left out take its defaults)."""
    size = cfg.vision.image_size
    if cfg.num_image_slots == len(OPENPI_CAMERAS):
        cameras = [LEROBOT_IMAGE_PREFIX + name for name in OPENPI_CAMERAS]
    else:
        cameras = [f"{LEROBOT_IMAGE_PREFIX}camera_{i}" for i in range(cfg.num_image_slots)]
    inputs: dict[str, Any] = {name: {"type": "VISUAL", "shape": [3, size, size]} for name in cameras}
    inputs["observation.state"] = {"type": "STATE", "shape": [32]}
    return {
        "type": "pi05",
        "paligemma_variant": variant_name(cfg.backbone, "gemma_2b", LEROBOT_VARIANTS),
        "action_expert_variant": variant_name(cfg.expert, "gemma_300m", LEROBOT_VARIANTS),
        "dtype": "bfloat16" if precision == "bfloat16" else "float32",
        "n_obs_steps": 1,
        "chunk_size": cfg.action_horizon,
        "n_action_steps": cfg.action_horizon,
        "max_state_dim": 32,
        "max_action_dim": cfg.action_dim,
        "num_inference_steps": cfg.num_denoise_steps,
        "image_resolution": [size, size],
        "empty_cameras": 0,
        "tokenizer_max_length": cfg.max_prompt_tokens,
        "input_features": inputs,
        "output_features": {"action": {"type": "ACTION", "shape": [cfg.action_dim]}},
    }
