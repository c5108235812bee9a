"""State/action normalization with a checkpoint's statistics (openpi's `norm_stats.json`, LeRobot's processors).

Two families of formulas, chosen by where the statistics came from (``formula``):

* ``openpi`` (Normalize/Unnormalize in ``openpi/transforms.py``), eps = 1e-6 always added:
    quantile: x_n = (x - q01) / (q99 - q01 + eps) * 2 - 1,   x = (x_n + 1) / 2 * (q99 - q01 + eps) + q01
    mean_std: x_n = (x - mean) / (std + eps),                 x = x_n * (std + eps) + mean
* ``lerobot`` (``_NormalizationMixin._apply_transform`` in ``lerobot/processor/normalize_processor.py``),
  eps (1e-8 by default) only replaces a zero range, and the mean/std inverse has no eps:
    quantile:   d = q99 - q01 (eps where 0);  x_n = 2 (x - q01) / d - 1,  x = (x_n + 1) d / 2 + q01
    quantile10: the same with q10/q90;  min_max: the same with min/max
    mean_std:   x_n = (x - mean) / (std + eps),  x = x_n * std + mean
  and ``identity`` passes values through (LeRobot's IDENTITY, or a feature type missing from its norm map).

Statistics wider than the data use their leading entries (openpi slices them to the state's width). The model
pads actions to its action_dim (32 for pi0.5); unnormalizing keeps only the statistics' dimensions.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

import numpy as np

NormMode = Literal["quantile", "mean_std", "min_max", "quantile10", "identity"]
NORM_MODES: tuple[str, ...] = ("quantile", "mean_std", "min_max", "quantile10", "identity")
Formula = Literal["openpi", "lerobot"]
EPS = 1e-6
LEROBOT_EPS = 1e-8
# The statistics each mode reads (lower, upper) or (centre, scale).
_MODE_FIELDS = {"quantile": ("q01", "q99"), "quantile10": ("q10", "q90"), "min_max": ("min", "max"), "mean_std": ("mean", "std")}
STATE_KEY = "state"
ACTIONS_KEY = "actions"


class NormStatsError(ValueError):
    """Normalization statistics are missing, malformed or do not fit the data."""


@dataclass(frozen=True)
class NormStats:
    """Statistics of one key (state or actions). openpi files always have mean/std and q01/q99 for pi0.5;
    LeRobot files may also have min/max and q10/q90. Absent fields are None."""

    mean: np.ndarray | None
    std: np.ndarray | None
    q01: np.ndarray | None = None
    q99: np.ndarray | None = None
    min: np.ndarray | None = None
    max: np.ndarray | None = None
    q10: np.ndarray | None = None
    q90: np.ndarray | None = None

    @property
    def dim(self) -> int:
        return int(next(v for v in self.fields().values()).shape[0])

    def fields(self) -> dict[str, np.ndarray]:
        """The fields that are present, by name."""
        return {f: v for f in ("mean", "std", "q01", "q99", "min", "max", "q10", "q90") if (v := getattr(self, f)) is not None}

    def has(self, mode: str) -> bool:
        return mode == "identity" or all(getattr(self, f) is not None for f in _MODE_FIELDS[mode])

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any], where: str) -> "NormStats":
        """Any subset of the fields (LeRobot writes what its dataset statistics have); lengths must agree."""
        known = ("mean", "std", "q01", "q99", "min", "max", "q10", "q90")
        fields = {name: _vector(arrays[name], f"{where}.{name}") for name in known if arrays.get(name) is not None}
        if not fields:
            raise NormStatsError(f"{where}: no statistics (expected some of {list(known)})")
        dims = {name: arr.shape[0] for name, arr in fields.items()}
        if len(set(dims.values())) != 1:
            raise NormStatsError(f"{where}: fields have different lengths {dims}")
        return cls(**{name: fields.get(name) for name in known})  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: Any, where: str = "norm stats") -> "NormStats":
        """Parse ``{"mean": [...], "std": [...], "q01": [...], "q99": [...]}`` and validate it."""
        if not isinstance(data, Mapping):
            raise NormStatsError(f"{where}: expected a mapping with mean/std/q01/q99, got {type(data).__name__}")
        fields: dict[str, np.ndarray | None] = {}
        for name in ("mean", "std", "q01", "q99"):
            value = data.get(name)
            if value is None:
                if name in ("mean", "std"):
                    raise NormStatsError(f"{where}: missing {name!r}")
                fields[name] = None
                continue
            fields[name] = _vector(value, f"{where}.{name}")
        dims = {name: arr.shape[0] for name, arr in fields.items() if arr is not None}
        if len(set(dims.values())) != 1:
            raise NormStatsError(f"{where}: fields have different lengths {dims}")
        if (fields["q01"] is None) != (fields["q99"] is None):
            raise NormStatsError(f"{where}: has only one of q01/q99")
        std = fields["std"]
        assert std is not None
        if np.any(std < 0):
            raise NormStatsError(f"{where}.std: negative at indices {np.flatnonzero(std < 0).tolist()}")
        if fields["q01"] is not None and fields["q99"] is not None:
            inverted = np.flatnonzero(fields["q99"] < fields["q01"])
            if inverted.size:
                raise NormStatsError(f"{where}: q99 < q01 at indices {inverted.tolist()}")
        return cls(**fields)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, list[float]]:
        return {name: arr.tolist() for name, arr in self.fields().items()}


def _vector(value: Any, where: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise NormStatsError(f"{where}: not a list of numbers ({exc})") from exc
    if arr.ndim != 1 or arr.size == 0:
        raise NormStatsError(f"{where}: expected a non-empty 1-D list, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise NormStatsError(f"{where}: non-finite values at indices {np.flatnonzero(~np.isfinite(arr)).tolist()}")
    return arr


def parse_norm_stats(data: Any, where: str = "norm stats") -> dict[str, NormStats]:
    """Stats per key from openpi's ``{"norm_stats": {...}}`` layout or a plain ``{"state": ..., "actions": ...}``."""
    if isinstance(data, Mapping) and "norm_stats" in data:
        data = data["norm_stats"]
        where = f"{where}: norm_stats"
    if not isinstance(data, Mapping):
        raise NormStatsError(f"{where}: expected a mapping of keys to statistics, got {type(data).__name__}")
    stats = {str(key): NormStats.from_dict(value, f"{where}[{key!r}]") for key, value in data.items()}
    missing = [k for k in (STATE_KEY, ACTIONS_KEY) if k not in stats]
    if missing:
        raise NormStatsError(f"{where}: missing {missing} (has {sorted(stats)})")
    return stats


def load_norm_stats(path: str | os.PathLike[str]) -> dict[str, NormStats]:
    """Read and validate a norm_stats.json file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise NormStatsError(f"norm stats file not found: {path}") from None
    except OSError as exc:
        raise NormStatsError(f"cannot read norm stats {path}: {exc}") from exc
    try:
        # json accepts bare NaN/Infinity tokens; _vector rejects them with the field's name.
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NormStatsError(f"{path}: invalid JSON ({exc})") from exc
    return parse_norm_stats(data, str(path))


def find_norm_stats(checkpoint_dir: str | os.PathLike[str], asset_id: str | None = None) -> Path:
    """Locate ``<checkpoint_dir>/assets/<asset_id>/norm_stats.json`` (asset ids may contain '/').

    Without `asset_id` the single file present is used; none or several is an error listing what exists.
    """
    assets = Path(checkpoint_dir) / "assets"
    if not assets.is_dir():
        raise NormStatsError(f"no assets directory in checkpoint {checkpoint_dir} (expected {assets})")
    found = {p.parent.relative_to(assets).as_posix(): p for p in sorted(assets.rglob("norm_stats.json"))}
    if asset_id is not None:
        asset_id = asset_id.strip("/")
        if asset_id in found:
            return found[asset_id]
        raise NormStatsError(
            f"no norm_stats.json for asset id {asset_id!r} under {assets}; found: {sorted(found) or 'none'}"
        )
    if len(found) == 1:
        return next(iter(found.values()))
    if not found:
        raise NormStatsError(f"no norm_stats.json under {assets}")
    raise NormStatsError(f"several norm_stats.json under {assets}; choose an asset id from {sorted(found)}")


class Normalizer:
    """Normalizes robot state for the model and turns model actions back into robot units.

    ``mode`` applies to both keys unless ``action_mode`` is given (LeRobot sets a mode per feature type).
    ``source`` says where the statistics came from, for messages.
    """

    def __init__(
        self,
        stats: Mapping[str, NormStats],
        mode: NormMode = "quantile",
        state_key: str = STATE_KEY,
        actions_key: str = ACTIONS_KEY,
        action_mode: NormMode | None = None,
        formula: Formula = "openpi",
        eps: float | None = None,
        source: str = "",
    ) -> None:
        if formula not in ("openpi", "lerobot"):
            raise NormStatsError(f"unknown normalization formula {formula!r}; choose 'openpi' or 'lerobot'")
        allowed = NORM_MODES if formula == "lerobot" else ("quantile", "mean_std")
        modes = {state_key: mode, actions_key: mode if action_mode is None else action_mode}
        for key, key_mode in modes.items():
            if key_mode not in allowed:
                raise NormStatsError(f"unknown normalization mode {key_mode!r}; choose one of {list(allowed)}")
            if key not in stats:
                raise NormStatsError(f"norm stats have no {key!r} entry (have {sorted(stats)})")
            if not stats[key].has(key_mode):
                need = "/".join(_MODE_FIELDS[key_mode])
                hint = "; use mode='mean_std'" if key_mode == "quantile" else ""
                raise NormStatsError(f"{key_mode} normalization needs {need} for {key!r}{hint}")
        self.mode: NormMode = modes[state_key]  # type: ignore[assignment]
        self.action_mode: NormMode = modes[actions_key]  # type: ignore[assignment]
        self.formula: Formula = formula
        self.eps = (EPS if formula == "openpi" else LEROBOT_EPS) if eps is None else float(eps)
        self.source = source
        self.state_stats = stats[state_key]
        self.action_stats = stats[actions_key]

    @classmethod
    def from_checkpoint(
        cls, checkpoint_dir: str | os.PathLike[str], asset_id: str | None = None, mode: NormMode = "quantile"
    ) -> "Normalizer":
        return cls(load_norm_stats(find_norm_stats(checkpoint_dir, asset_id)), mode=mode)

    @property
    def state_dim(self) -> int:
        return self.state_stats.dim

    @property
    def action_dim(self) -> int:
        return self.action_stats.dim

    def describe(self) -> str:
        modes = self.mode if self.mode == self.action_mode else f"state {self.mode}, actions {self.action_mode}"
        return f"{modes} ({self.formula} formulas{', ' + self.source if self.source else ''})"

    def _bounds(self, stats: NormStats, mode: str, width: int) -> tuple[np.ndarray, np.ndarray]:
        """(offset, scale) per dimension, sliced to ``width``: x_n = (x - offset) / scale (then 2·-1 for ranges)."""
        lo_name, hi_name = _MODE_FIELDS[mode]
        lo, hi = getattr(stats, lo_name)[:width], getattr(stats, hi_name)[:width]
        if mode == "mean_std":
            return lo, hi + self.eps
        span = hi - lo
        if self.formula == "openpi":
            return lo, span + self.eps
        return lo, np.where(span == 0, self.eps, span)

    def normalize_state(self, state: Any, clip: bool = False) -> np.ndarray:
        """Robot state [..., D] -> normalized [..., D] in the precision of the checkpoint's framework, which is
        what its prompt digitizes: LeRobot's normalizer runs on float32 tensors (float32 result), openpi's
        ``Normalize`` on the float64 numpy state (float64 result). Near a bin edge one rounding moves the bin.
        `clip` limits it to [-1, 1]. Statistics wider than D use their first D entries (as openpi's Normalize).
        """
        x = np.asarray(state, dtype=np.float64)
        d = self.state_dim
        if x.ndim == 0 or x.shape[-1] > d:
            got = "a scalar" if x.ndim == 0 else f"{x.shape[-1]} values"
            raise NormStatsError(f"state has {got} but the norm stats describe only {d} state dimensions")
        if not np.all(np.isfinite(x)):
            raise NormStatsError("state has non-finite values")
        if self.formula == "lerobot":
            out = self._lerobot_forward32(x.astype(np.float32), self.state_stats, self.mode)
        else:
            out = self._forward(x, self.state_stats, self.mode)
        if clip:
            out = np.clip(out, -1.0, 1.0).astype(out.dtype)
        return out

    def _lerobot_forward32(self, x: np.ndarray, stats: NormStats, mode: str) -> np.ndarray:
        """LeRobot ``_NormalizationMixin._apply_transform`` in float32, operation by operation (each elementwise
        float32 operation rounds the same in numpy and torch)."""
        if mode == "identity":
            return x
        f32 = np.float32
        lo_name, hi_name = _MODE_FIELDS[mode]
        width = x.shape[-1]
        lo = getattr(stats, lo_name)[:width].astype(f32)
        hi = getattr(stats, hi_name)[:width].astype(f32)
        if mode == "mean_std":
            return (x - lo) / (hi + f32(self.eps))
        denom = hi - lo
        denom = np.where(denom == 0, f32(self.eps), denom).astype(f32)
        return f32(2.0) * (x - lo) / denom - f32(1.0)

    def normalize_actions(self, actions: Any) -> np.ndarray:
        """Robot actions [..., D] -> normalized float32 [..., D] (the inverse of `unnormalize_actions`; training)."""
        a = np.asarray(actions, dtype=np.float64)
        if a.ndim == 0 or a.shape[-1] != self.action_dim:
            raise NormStatsError(f"actions have shape {a.shape} but the norm stats describe {self.action_dim} action dimensions")
        return self._forward(a, self.action_stats, self.action_mode).astype(np.float32)

    def _forward(self, x: np.ndarray, stats: NormStats, mode: str) -> np.ndarray:
        if mode == "identity":
            return x
        offset, scale = self._bounds(stats, mode, x.shape[-1])
        if mode == "mean_std":
            return (x - offset) / scale
        return (x - offset) / scale * 2.0 - 1.0

    def unnormalize_actions(self, actions: Any) -> np.ndarray:
        """Model actions [..., A] -> robot actions float64 [..., min(A, dim)] (the model's padding cut off)."""
        a = np.asarray(actions, dtype=np.float64)
        if a.ndim == 0:
            raise NormStatsError("actions are a scalar; expected [..., action_dim]")
        a = a[..., : min(self.action_dim, a.shape[-1])]
        mode, stats = self.action_mode, self.action_stats
        if mode == "identity":
            return a
        offset, scale = self._bounds(stats, mode, a.shape[-1])
        if mode == "mean_std":
            if self.formula == "lerobot":  # LeRobot's inverse multiplies by std without eps
                scale = stats.std[: a.shape[-1]]  # type: ignore[index]
            return a * scale + offset
        return (a + 1.0) / 2.0 * scale + offset


def save_norm_stats(path: str | os.PathLike[str], stats: Mapping[str, NormStats]) -> None:
    """Write stats in openpi's layout (used to build test checkpoints)."""
    payload = {"norm_stats": {key: value.to_dict() for key, value in stats.items()}}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=2, allow_nan=False))

