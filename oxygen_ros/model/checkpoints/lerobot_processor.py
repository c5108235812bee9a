"""Read what a LeRobot policy folder's processor pipelines do around the model.

LeRobot saves its pre/post-processing next to the weights (``DataProcessorPipeline.save_pretrained``):
``policy_preprocessor.json`` and ``policy_postprocessor.json`` list the steps (``{"name", "steps": [{
"registry_name", "config", "state_file"?}]}``), and each stateful step's tensors go to
``<pipeline>_step_<i>_<registry_name>.safetensors``. For pi0.5 (``make_pi05_pre_post_processors``):

* ``normalizer_processor`` (preprocessor) / ``unnormalizer_processor`` (postprocessor): config ``{"eps",
  "features": {name: {"type", "shape"}}, "norm_map": {feature type: mode}}``; state file of flat tensors named
  ``<feature>.<stat>`` (``observation.state.q01``, ``action.q99``, ...).
* ``relative_actions_processor``: ``{"enabled", "exclude_joints", "action_names"}`` — joints relative to the
  state (except the excluded names), added back after unnormalizing by ``absolute_actions_processor``.
* ``tokenizer_processor``: ``{"max_length", ...}``; ``pi05_prepare_state_tokenizer_processor_step``:
  ``{"include_state_in_prompt"}`` (the state goes into the prompt unless LeRobot MEM is on).

Only these files are read (never unpickled); a step this module does not know is ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.numpy import load_file

from oxygen_ros.model.checkpoints.normalize import ACTIONS_KEY, STATE_KEY, NormMode, NormStats, NormStatsError

PREPROCESSOR = "policy_preprocessor.json"
POSTPROCESSOR = "policy_postprocessor.json"
STATE_FEATURE = "observation.state"
ACTION_FEATURE = "action"
# LeRobot NormalizationMode values → ours.
_MODES: dict[str, NormMode] = {
    "IDENTITY": "identity", "MEAN_STD": "mean_std", "MIN_MAX": "min_max", "QUANTILES": "quantile", "QUANTILE10": "quantile10",
}  # fmt: skip


class ProcessorError(ValueError):
    """A LeRobot processor file is unreadable or inconsistent; the message names the file."""


@dataclass(frozen=True)
class RelativeActions:
    """LeRobot's relative-actions step: which action dimensions were trained relative to the state."""

    exclude_joints: tuple[str, ...]
    action_names: tuple[str, ...] | None

    def mask(self, action_dim: int) -> tuple[bool, ...]:
        """``RelativeActionsProcessorStep._build_mask``: excluded when a token equals or is inside the name."""
        tokens = [str(t).lower() for t in self.exclude_joints if t]
        if not tokens or self.action_names is None:
            return (True,) * action_dim
        mask = [not any(t == n.lower() or t in n.lower() for t in tokens) for n in self.action_names[:action_dim]]
        return tuple(mask + [True] * (action_dim - len(mask)))


@dataclass(frozen=True)
class LeRobotProcessors:
    stats: dict[str, NormStats]  # STATE_KEY / ACTIONS_KEY (whichever the files have)
    state_mode: NormMode
    action_mode: NormMode
    eps: float
    relative: RelativeActions | None  # None: relative actions off
    tokenizer_max_length: int | None
    include_state_in_prompt: bool
    source: str  # the files, for messages


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProcessorError(f"{path}: cannot read the LeRobot processor config ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise ProcessorError(f"{path}: expected a LeRobot pipeline config with a 'steps' list")
    return data


def _step(data: dict[str, Any], name: str) -> tuple[int, dict[str, Any]] | None:
    for index, entry in enumerate(data["steps"]):
        if isinstance(entry, dict) and entry.get("registry_name") == name:
            return index, entry
    return None


def _stats_file(directory: Path, pipeline: str, index: int, entry: dict[str, Any]) -> Path:
    """The step's state file: as listed in the config, else LeRobot's naming rule."""
    name = entry.get("state_file") or f"{pipeline}_step_{index}_{entry['registry_name']}.safetensors"
    if Path(name).name != name:
        raise ProcessorError(f"{directory / (pipeline + '.json')}: state_file {name!r} must be a plain file name")
    return directory / name


def _normalizer(directory: Path, pipeline: str, data: dict[str, Any], step: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]] | None:
    """(config, {feature: {stat: array}}) of a (un)normalizer step, or None when the pipeline has none."""
    found = _step(data, step)
    if found is None:
        return None
    index, entry = found
    config = entry.get("config") or {}
    path = _stats_file(directory, pipeline, index, entry)
    if not path.is_file():
        raise ProcessorError(f"{directory / (pipeline + '.json')} lists the {step} statistics {path.name}, which is missing")
    try:
        flat = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ProcessorError(f"{path}: not a readable safetensors file: {exc}") from None
    per_feature: dict[str, dict[str, Any]] = {}
    for key, tensor in flat.items():
        feature, _, stat = key.rpartition(".")
        per_feature.setdefault(feature, {})[stat] = tensor.reshape(-1)
    return config, per_feature


def _mode(config: dict[str, Any], feature_type: str, where: Path) -> NormMode:
    raw = (config.get("norm_map") or {}).get(feature_type, "IDENTITY")  # LeRobot: unmapped types pass through
    if raw not in _MODES:
        raise ProcessorError(f"{where}: unknown normalization mode {raw!r} for {feature_type}; known: {sorted(_MODES)}")
    return _MODES[raw]


def _feature_of(config: dict[str, Any], feature_type: str, default: str) -> str:
    features = config.get("features") or {}
    names = [k for k, v in features.items() if isinstance(v, dict) and v.get("type") == feature_type]
    return names[0] if names else default


def read_lerobot_processors(directory: Path) -> LeRobotProcessors | None:
    """The normalization, relative-action and prompt settings of a LeRobot folder; None without processor files."""
    pre_path, post_path = directory / PREPROCESSOR, directory / POSTPROCESSOR
    if not pre_path.is_file() and not post_path.is_file():
        return None
    pre = _read(pre_path) if pre_path.is_file() else {"steps": []}
    post = _read(post_path) if post_path.is_file() else {"steps": []}
    stats: dict[str, NormStats] = {}
    state_mode: NormMode = "identity"
    action_mode: NormMode = "identity"
    eps = 1e-8
    normalizer = _normalizer(directory, "policy_preprocessor", pre, "normalizer_processor")
    if normalizer is not None:
        config, arrays = normalizer
        eps = float(config.get("eps", eps))
        state_feature = _feature_of(config, "STATE", STATE_FEATURE)
        state_mode = _mode(config, "STATE", pre_path)
        if state_feature in arrays:
            stats[STATE_KEY] = _norm_stats(arrays[state_feature], f"{pre_path.name}: {state_feature}")
    unnormalizer = _normalizer(directory, "policy_postprocessor", post, "unnormalizer_processor")
    source = normalizer or unnormalizer
    if unnormalizer is not None:
        config, arrays = unnormalizer
        action_feature, where = _feature_of(config, "ACTION", ACTION_FEATURE), post_path
    elif normalizer is not None:  # the preprocessor normalizes training actions with the same statistics
        config, arrays = normalizer
        action_feature, where = _feature_of(config, "ACTION", ACTION_FEATURE), pre_path
    if source is not None:
        action_mode = _mode(config, "ACTION", where)
        if action_feature in arrays:
            stats[ACTIONS_KEY] = _norm_stats(arrays[action_feature], f"{where.name}: {action_feature}")
    relative = None
    found = _step(pre, "relative_actions_processor")
    if found is not None and (found[1].get("config") or {}).get("enabled"):
        rc = found[1]["config"]
        names = rc.get("action_names")
        relative = RelativeActions(tuple(rc.get("exclude_joints") or ()), tuple(names) if names else None)
    found = _step(pre, "tokenizer_processor")
    max_length = (found[1].get("config") or {}).get("max_length") if found else None
    found = _step(pre, "pi05_prepare_state_tokenizer_processor_step")
    include_state = bool((found[1].get("config") or {}).get("include_state_in_prompt", True)) if found else True
    files = [p.name for p in (pre_path, post_path) if p.is_file()]
    return LeRobotProcessors(
        stats=stats, state_mode=state_mode, action_mode=action_mode, eps=eps, relative=relative,
        tokenizer_max_length=max_length if isinstance(max_length, int) else None,
        include_state_in_prompt=include_state, source=" + ".join(str(directory / f) for f in files),
    )  # fmt: skip


def _norm_stats(arrays: dict[str, Any], where: str) -> NormStats:
    try:
        return NormStats.from_arrays(arrays, where)
    except NormStatsError as exc:
        raise ProcessorError(str(exc)) from None
