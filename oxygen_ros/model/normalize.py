"""State/action normalization with a checkpoint's statistics (openpi's `norm_stats.json`).

Formulas as in openpi's Normalize/Unnormalize transforms:
  quantile: x_n = 2 * (x - q01) / (q99 - q01 + 1e-6) - 1,   x = (x_n + 1) / 2 * (q99 - q01 + 1e-6) + q01
  mean_std: x_n = (x - mean) / (std + 1e-6),                  x = x_n * (std + 1e-6) + mean
The model pads actions to its action_dim (32 for pi0.5); unnormalizing keeps only the statistics' dimensions.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

import numpy as np

NormMode = Literal["quantile", "mean_std"]
EPS = 1e-6
STATE_KEY = "state"
ACTIONS_KEY = "actions"


class NormStatsError(ValueError):
    """Normalization statistics are missing, malformed or do not fit the data."""


@dataclass(frozen=True)
class NormStats:
    """Statistics of one key (state or actions); q01/q99 may be absent in mean/std-only files."""

    mean: np.ndarray
    std: np.ndarray
    q01: np.ndarray | None = None
    q99: np.ndarray | None = None

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

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
        out = {"mean": self.mean.tolist(), "std": self.std.tolist()}
        if self.q01 is not None and self.q99 is not None:
            out["q01"] = self.q01.tolist()
            out["q99"] = self.q99.tolist()
        return out


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
    """Normalizes robot state for the model and turns model actions back into robot units."""

    def __init__(
        self,
        stats: Mapping[str, NormStats],
        mode: NormMode = "quantile",
        state_key: str = STATE_KEY,
        actions_key: str = ACTIONS_KEY,
    ) -> None:
        if mode not in ("quantile", "mean_std"):
            raise NormStatsError(f"unknown normalization mode {mode!r}; choose 'quantile' or 'mean_std'")
        for key in (state_key, actions_key):
            if key not in stats:
                raise NormStatsError(f"norm stats have no {key!r} entry (have {sorted(stats)})")
            if mode == "quantile" and stats[key].q01 is None:
                raise NormStatsError(f"quantile normalization needs q01/q99 for {key!r}; use mode='mean_std'")
        self.mode: NormMode = mode
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

    def normalize_state(self, state: Any, clip: bool = False) -> np.ndarray:
        """Robot state [..., D] -> normalized float32 [..., D]; `clip` limits it to [-1, 1]."""
        x = np.asarray(state, dtype=np.float64)
        d = self.state_dim
        if x.ndim == 0 or x.shape[-1] != d:
            got = "a scalar" if x.ndim == 0 else f"{x.shape[-1]} values"
            raise NormStatsError(f"state has {got} but the norm stats describe {d} state dimensions")
        if not np.all(np.isfinite(x)):
            raise NormStatsError("state has non-finite values")
        out = self._normalize(x, self.state_stats)
        if clip:
            out = np.clip(out, -1.0, 1.0)
        return out.astype(np.float32)

    def normalize_actions(self, actions: Any) -> np.ndarray:
        """Robot actions [..., D] -> normalized float32 [..., D] (the inverse of `unnormalize_actions`; training)."""
        a = np.asarray(actions, dtype=np.float64)
        if a.ndim == 0 or a.shape[-1] != self.action_dim:
            raise NormStatsError(f"actions have shape {a.shape} but the norm stats describe {self.action_dim} action dimensions")
        return self._normalize(a, self.action_stats).astype(np.float32)

    def _normalize(self, x: np.ndarray, s: NormStats) -> np.ndarray:
        if self.mode == "quantile":
            assert s.q01 is not None and s.q99 is not None
            return 2.0 * (x - s.q01) / (s.q99 - s.q01 + EPS) - 1.0
        return (x - s.mean) / (s.std + EPS)

    def unnormalize_actions(self, actions: Any) -> np.ndarray:
        """Model actions [..., A] with A >= the stats' dim -> robot actions float64 [..., dim] (padding cut off)."""
        a = np.asarray(actions, dtype=np.float64)
        d = self.action_dim
        if a.ndim == 0 or a.shape[-1] < d:
            got = "a scalar" if a.ndim == 0 else f"{a.shape[-1]} dimensions"
            raise NormStatsError(f"actions have {got} but the norm stats describe {d} action dimensions")
        a = a[..., :d]
        s = self.action_stats
        if self.mode == "quantile":
            assert s.q01 is not None and s.q99 is not None
            return (a + 1.0) / 2.0 * (s.q99 - s.q01 + EPS) + s.q01
        return a * (s.std + EPS) + s.mean


def save_norm_stats(path: str | os.PathLike[str], stats: Mapping[str, NormStats]) -> None:
    """Write stats in openpi's layout (used to build test checkpoints)."""
    payload = {"norm_stats": {key: value.to_dict() for key, value in stats.items()}}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=2, allow_nan=False))

