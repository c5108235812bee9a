"""What a checkpoint says about running it, beyond its weights: statistics, chunk length, prompt format,
relative actions, camera names, image resize and bf16 islands, each as the checkpoint's own framework does it.

openpi: ``<checkpoint>/assets/<asset_id>/norm_stats.json`` (what openpi's policy loader reads) or
``<checkpoint>/../assets/<asset_id>/norm_stats.json`` (where ``convert_jax_model_to_pytorch.py`` copies assets
from: the parent of the checkpoint it converted); quantile normalization for pi0.5 (``use_quantile_norm``
is on for every model type but pi0); the chunk length is ``action_horizon``; whether the state goes into the
prompt (``discrete_state_input``) is not in the converter's config.json, so it is recorded only when a
config.json carries that field. LeRobot: the processor files (``lerobot_processor.py``), ``chunk_size``,
``n_action_steps``, the state always in the prompt, image features in ``input_features`` order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oxygen_ros.model.network.config import ModelConfig
from oxygen_ros.model.checkpoints.key_maps import OPENPI_CAMERAS, Layout, lerobot_cameras
from oxygen_ros.model.checkpoints.lerobot_processor import LeRobotProcessors, ProcessorError, RelativeActions, read_lerobot_processors
from oxygen_ros.model.checkpoints.normalize import ACTIONS_KEY, STATE_KEY, Formula, NormMode, NormStats, NormStatsError, load_norm_stats
from oxygen_ros.model.network.precision import IslandStyle

OXYGEN_POLICY_KEYS = ("delta_action_mask",)  # config.json keys of an oxygen_ros checkpoint beyond ModelConfig


class CheckpointInfoError(ValueError):
    """The checkpoint's side files (statistics, processors) are unreadable or inconsistent."""


@dataclass(frozen=True)
class FoundStats:
    """Normalization statistics shipped with a checkpoint, and how its framework applies them."""

    stats: dict[str, NormStats]
    state_mode: NormMode
    action_mode: NormMode
    formula: Formula
    eps: float | None
    source: str


@dataclass(frozen=True)
class CheckpointInfo:
    layout: Layout
    chunk_length: int  # the H it was trained with (openpi action_horizon, LeRobot chunk_size)
    n_action_steps: int | None  # LeRobot n_action_steps: actions executed per chunk (None: not recorded)
    prompt_format: str | None  # recorded prompt format; None = the checkpoint does not say
    prompt_format_note: str  # where the format comes from, or what to do when it is not recorded
    delta_action_mask: tuple[bool, ...] | None  # dims trained relative to the state (LeRobot relative actions)
    image_features: tuple[str, ...]  # one name per image slot, in prefix order
    resize_mode: str  # how the framework resizes camera images ("pil" openpi, "bilinear" LeRobot)
    islands: IslandStyle  # which weights the framework keeps float32 in bf16
    norm: FoundStats | None  # None: no statistics found
    norm_searched: tuple[str, ...]  # where statistics were looked for
    norm_choices: tuple[str, ...] = ()  # several openpi asset ids and no way to choose one


def _openpi_assets(directory: Path) -> tuple[list[Path], tuple[str, ...]]:
    """norm_stats.json files of the first assets folder that has any: the checkpoint's, then its parent's."""
    searched: list[str] = []
    for assets in (directory / "assets", directory.parent / "assets"):
        searched.append(f"{assets}/<asset_id>/norm_stats.json")
        if assets.is_dir():
            found = sorted(assets.rglob("norm_stats.json"))
            if found:
                return found, tuple(searched)
    return [], tuple(searched)


def _openpi_stats(directory: Path) -> tuple[FoundStats | None, tuple[str, ...], tuple[str, ...]]:
    files, searched = _openpi_assets(directory)
    if len(files) > 1:  # openpi picks one by the training config's asset_id, which the checkpoint does not store
        return None, searched, tuple(str(p) for p in files)
    if not files:
        return None, searched, ()
    try:
        stats = load_norm_stats(files[0])
    except NormStatsError as exc:
        raise CheckpointInfoError(str(exc)) from None
    return FoundStats(stats, "quantile", "quantile", "openpi", None, str(files[0])), searched, ()


def _lerobot_stats(directory: Path, processors: LeRobotProcessors | None) -> tuple[FoundStats | None, tuple[str, ...]]:
    searched = (f"{directory}/policy_preprocessor.json + policy_postprocessor.json (normalizer step files)",)
    if processors is None or not processors.stats:
        return None, searched
    stats = dict(processors.stats)
    missing = [k for k in (STATE_KEY, ACTIONS_KEY) if k not in stats]
    if missing:  # a mode of identity needs no statistics; anything else does
        modes = {STATE_KEY: processors.state_mode, ACTIONS_KEY: processors.action_mode}
        needed = [k for k in missing if modes[k] != "identity"]
        if needed:
            raise CheckpointInfoError(f"{processors.source}: no statistics for {needed} although their mode is not IDENTITY")
        width = next(iter(stats.values())).dim
        for key in missing:
            stats[key] = NormStats.from_arrays({"mean": [0.0] * width, "std": [1.0] * width}, key)
    found = FoundStats(stats, processors.state_mode, processors.action_mode, "lerobot", processors.eps, processors.source)
    return found, searched


def read_checkpoint_info(directory: Path, layout: Layout, config_json: dict[str, Any] | None, config: ModelConfig) -> CheckpointInfo:
    """Everything but the weights; ``config_json`` is the parsed config.json (None for a training checkpoint)."""
    data = config_json or {}
    if layout == "lerobot":
        try:
            processors = read_lerobot_processors(directory)
        except ProcessorError as exc:
            raise CheckpointInfoError(str(exc)) from None
        norm, searched = _lerobot_stats(directory, processors)
        if processors is not None and not processors.include_state_in_prompt:
            raise CheckpointInfoError(f"{processors.source}: include_state_in_prompt=false (LeRobot MEM) is not supported")
        relative = processors.relative if processors is not None else None
        if processors is None and data.get("use_relative_actions"):  # no processor files: the config's own fields
            names = data.get("action_feature_names")
            relative = RelativeActions(tuple(data.get("relative_exclude_joints") or ()), tuple(names) if names else None)
        steps = data.get("n_action_steps")
        return CheckpointInfo(
            layout=layout,
            chunk_length=config.action_horizon,
            n_action_steps=steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
            prompt_format="pi05_state",
            prompt_format_note="LeRobot pi05 always puts the digitized state in the prompt (Pi05PrepareStateTokenizerProcessorStep)",
            delta_action_mask=relative.mask(config.action_dim) if relative is not None else None,
            image_features=slot_names(layout, data, config),
            resize_mode="bilinear",
            islands="lerobot",
            norm=norm,
            norm_searched=searched,
        )
    norm, searched, choices = _openpi_stats(directory)
    recorded = data.get("discrete_state_input")
    if isinstance(recorded, bool):
        fmt: str | None = "pi05_state" if recorded else "pi05"
        note = f"config.json discrete_state_input={str(recorded).lower()}"
    elif layout == "oxygen":
        fmt, note = None, "an oxygen_ros checkpoint records no prompt format"
    else:
        fmt, note = None, (
            "openpi's config.json does not record discrete_state_input: pi05_base, pi05_droid and pi05_aloha put the "
            "state in the prompt (pi05_state); pi05_libero does not (pi05)"
        )
    return CheckpointInfo(
        layout=layout,
        chunk_length=config.action_horizon,
        n_action_steps=None,
        prompt_format=fmt,
        prompt_format_note=note,
        # openpi keeps DeltaActions in the training config, not in the checkpoint; oxygen_ros records it
        delta_action_mask=_oxygen_delta_mask(data, config) if layout == "oxygen" else None,
        image_features=_default_slots(config),
        resize_mode="pil",
        islands="openpi",
        norm=norm,
        norm_searched=searched,
        norm_choices=choices,
    )


def _oxygen_delta_mask(data: dict[str, Any], config: ModelConfig) -> tuple[bool, ...] | None:
    mask = data.get("delta_action_mask")
    if mask is None:
        return None
    if not isinstance(mask, list) or not all(isinstance(m, bool) for m in mask) or len(mask) > config.action_dim:
        raise CheckpointInfoError(f"config.json delta_action_mask must be a list of at most {config.action_dim} booleans, got {mask!r}")
    return tuple(mask)


def slot_names(layout: Layout, config_json: dict[str, Any] | None, config: ModelConfig) -> tuple[str, ...]:
    """One name per image slot in prefix order: LeRobot's VISUAL input features (then its empty cameras), else
    openpi's camera names (base_0_rgb, left_wrist_0_rgb, right_wrist_0_rgb)."""
    if layout == "lerobot":
        return tuple(lerobot_cameras(config_json or {})) or _default_slots(config)
    return _default_slots(config)


def _default_slots(config: ModelConfig) -> tuple[str, ...]:
    if config.num_image_slots == len(OPENPI_CAMERAS):
        return OPENPI_CAMERAS
    return tuple(f"camera_{i}" for i in range(config.num_image_slots))


def preset_info(config: ModelConfig) -> CheckpointInfo:
    """A built-in preset (random weights): openpi's conventions, no statistics."""
    return CheckpointInfo(
        layout="oxygen", chunk_length=config.action_horizon, n_action_steps=None, prompt_format=None,
        prompt_format_note="a preset records no prompt format", delta_action_mask=None,
        image_features=_default_slots(config), resize_mode="pil", islands="openpi", norm=None, norm_searched=(),
    )  # fmt: skip
