"""Normalization statistics: openpi file layouts, formulas, dimension handling, lookup in a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from oxygen_ros.model.checkpoints.normalize import (
    NormStats,
    NormStatsError,
    Normalizer,
    find_norm_stats,
    load_norm_stats,
    parse_norm_stats,
    save_norm_stats,
)
from oxygen_ros.model.tokenizers.prompt import discretize_state

STATE = {"mean": [0.0, 5.0, -2.0], "std": [1.0, 2.0, 0.5], "q01": [-1.0, 0.0, -3.0], "q99": [1.0, 10.0, -1.0]}
ACTIONS = {"mean": [0.5, -0.5], "std": [2.0, 4.0], "q01": [-2.0, 0.0], "q99": [2.0, 1.0]}


def write_stats(path: Path, payload: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    return path


@pytest.fixture
def normalizer() -> Normalizer:
    return Normalizer(parse_norm_stats({"state": STATE, "actions": ACTIONS}))


def test_openpi_and_plain_layouts_load_the_same(tmp_path: Path) -> None:
    openpi = load_norm_stats(write_stats(tmp_path / "a.json", {"norm_stats": {"state": STATE, "actions": ACTIONS}}))
    plain = load_norm_stats(write_stats(tmp_path / "b.json", {"state": STATE, "actions": ACTIONS}))
    for key in ("state", "actions"):
        for field in ("mean", "std", "q01", "q99"):
            assert np.array_equal(getattr(openpi[key], field), getattr(plain[key], field))
    assert openpi["state"].dim == 3 and openpi["actions"].dim == 2
    # save_norm_stats writes the openpi layout back.
    save_norm_stats(tmp_path / "c.json", openpi)
    assert "norm_stats" in json.loads((tmp_path / "c.json").read_text())
    assert np.array_equal(load_norm_stats(tmp_path / "c.json")["state"].q99, openpi["state"].q99)


def test_quantile_normalize_state(normalizer: Normalizer) -> None:
    x = np.array([0.5, 2.5, -1.0])
    # 2 * (x - q01) / (q99 - q01 + 1e-6) - 1, written out per dimension.
    expected = [2 * 1.5 / (2 + 1e-6) - 1, 2 * 2.5 / (10 + 1e-6) - 1, 2 * 2.0 / (2 + 1e-6) - 1]
    out = normalizer.normalize_state(x)
    assert out.dtype == np.float64  # openpi normalizes (and digitizes) the float64 state
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    # Batched input keeps its leading dims.
    assert normalizer.normalize_state(np.stack([x, x])).shape == (2, 3)


def test_quantile_unnormalize_cuts_model_padding(normalizer: Normalizer) -> None:
    model_out = np.zeros((10, 32), dtype=np.float32)
    model_out[:, 0] = 1.0
    model_out[:, 1] = -1.0
    model_out[:, 2:] = 123.0  # padding dims must be dropped, not unnormalized
    out = normalizer.unnormalize_actions(model_out)
    assert out.shape == (10, 2)
    # (a + 1) / 2 * (q99 - q01 + 1e-6) + q01
    np.testing.assert_allclose(out[0], [2.0 / 2 * (4 + 1e-6) - 2.0, 0.0], atol=1e-9)


def test_quantile_roundtrip_on_actions() -> None:
    norm = Normalizer(parse_norm_stats({"state": ACTIONS, "actions": ACTIONS}))
    a = np.array([[1.3, 0.25], [-1.9, 0.9]])
    np.testing.assert_allclose(norm.unnormalize_actions(norm.normalize_state(a).astype(np.float64)), a, atol=1e-6)


def test_mean_std_mode() -> None:
    stats = parse_norm_stats({"state": STATE, "actions": ACTIONS})
    norm = Normalizer(stats, mode="mean_std")
    expected = [1 / (1 + 1e-6), 4 / (2 + 1e-6), -0.5 / (0.5 + 1e-6)]
    np.testing.assert_allclose(norm.normalize_state([1.0, 9.0, -2.5]), expected, rtol=1e-6)
    np.testing.assert_allclose(norm.unnormalize_actions([1.0, -1.0, 7.0]), [1.0 * (2 + 1e-6) + 0.5, -(4 + 1e-6) - 0.5])
    # Mean/std-only files work in mean_std mode but not in quantile mode.
    no_q = parse_norm_stats({"state": {"mean": [0.0], "std": [1.0]}, "actions": {"mean": [0.0], "std": [1.0]}})
    Normalizer(no_q, mode="mean_std")
    with pytest.raises(NormStatsError, match="quantile normalization needs q01/q99 for 'state'"):
        Normalizer(no_q, mode="quantile")
    with pytest.raises(NormStatsError, match="unknown normalization mode 'minmax'"):
        Normalizer(stats, mode="minmax")  # type: ignore[arg-type]


def test_dimension_errors_and_wider_stats(normalizer: Normalizer) -> None:
    with pytest.raises(NormStatsError, match="state has 4 values but the norm stats describe only 3"):
        normalizer.normalize_state([0.0, 1.0, 2.0, 3.0])
    with pytest.raises(NormStatsError, match="non-finite"):
        normalizer.normalize_state([0.0, float("nan"), 0.0])
    # Wider statistics: their leading entries, as openpi's Normalize slices q01[..., :x.shape[-1]].
    q01, q99 = np.asarray(STATE["q01"][:2]), np.asarray(STATE["q99"][:2])
    x = np.array([0.5, 7.0])
    expected = (x - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0
    np.testing.assert_allclose(normalizer.normalize_state(x), expected, rtol=1e-6)
    a = np.full((10, 1), 0.5)
    aq01, aq99 = ACTIONS["q01"][0], ACTIONS["q99"][0]
    np.testing.assert_allclose(normalizer.unnormalize_actions(a), (a + 1.0) / 2.0 * (aq99 - aq01 + 1e-6) + aq01)


def test_clipped_state_feeds_digitization(normalizer: Normalizer) -> None:
    raw = np.array([5.0, 0.0, -1.0])  # far above q99, at q01, in the middle
    clipped = normalizer.normalize_state(raw, clip=True)
    assert clipped.min() >= -1.0 and clipped.max() <= 1.0
    assert clipped[0] == 1.0
    # Bins computed independently: 256 equal bins over [-1, 1].
    expected = [min(255, int(np.floor((float(v) + 1) * 128))) for v in clipped]
    assert discretize_state(clipped).tolist() == expected
    assert expected[0] == 255 and expected[1] == 0


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"state": STATE}, r"missing \['actions'\]"),
        ({"state": {**STATE, "std": [1.0, 2.0]}, "actions": ACTIONS}, "different lengths"),
        ({"state": {**STATE, "q99": None}, "actions": ACTIONS}, "only one of q01/q99"),
        ({"state": {**STATE, "mean": None}, "actions": ACTIONS}, "missing 'mean'"),
        ({"state": {**STATE, "q99": [-2.0, 10.0, -1.0]}, "actions": ACTIONS}, r"q99 < q01 at indices \[0\]"),
        ({"state": {**STATE, "std": [1.0, -1.0, 1.0]}, "actions": ACTIONS}, r"std: negative at indices \[1\]"),
        ({"state": {**STATE, "mean": "abc"}, "actions": ACTIONS}, "not a list of numbers"),
        ({"state": [1, 2], "actions": ACTIONS}, "expected a mapping"),
    ],
)
def test_malformed_stats(payload: dict, message: str) -> None:
    with pytest.raises(NormStatsError, match=message):
        parse_norm_stats(payload)


def test_nan_and_bad_json_in_file(tmp_path: Path) -> None:
    nan_file = tmp_path / "nan.json"
    bad_state = {**STATE, "q01": [0.0, float("nan"), 0.0]}
    nan_file.write_text(json.dumps({"norm_stats": {"state": bad_state, "actions": ACTIONS}}))
    with pytest.raises(NormStatsError, match=r"nan.json: norm_stats\['state'\].q01: non-finite values at indices \[1\]"):
        load_norm_stats(nan_file)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(NormStatsError, match="broken.json: invalid JSON"):
        load_norm_stats(broken)
    with pytest.raises(NormStatsError, match="not found"):
        load_norm_stats(tmp_path / "absent.json")


def test_find_norm_stats(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    payload = {"norm_stats": {"state": STATE, "actions": ACTIONS}}
    with pytest.raises(NormStatsError, match="no assets directory"):
        find_norm_stats(ckpt)
    (ckpt / "assets").mkdir(parents=True)
    with pytest.raises(NormStatsError, match="no norm_stats.json under"):
        find_norm_stats(ckpt)
    libero = write_stats(ckpt / "assets" / "physical-intelligence" / "libero" / "norm_stats.json", payload)
    assert find_norm_stats(ckpt) == libero  # the only one
    droid = write_stats(ckpt / "assets" / "droid" / "norm_stats.json", payload)
    with pytest.raises(NormStatsError, match=r"several .*\['droid', 'physical-intelligence/libero'\]"):
        find_norm_stats(ckpt)
    assert find_norm_stats(ckpt, "droid") == droid
    assert find_norm_stats(ckpt, "physical-intelligence/libero") == libero
    with pytest.raises(NormStatsError, match=r"asset id 'aloha'.*found: \['droid', 'physical-intelligence/libero'\]"):
        find_norm_stats(ckpt, "aloha")
    norm = Normalizer.from_checkpoint(ckpt, "droid", mode="mean_std")
    assert norm.mode == "mean_std" and norm.state_dim == 3 and norm.action_dim == 2


def test_normstats_dataclass_direct() -> None:
    s = NormStats.from_dict({"mean": [1, 2], "std": [1, 1]})
    assert s.q01 is None and s.dim == 2 and s.to_dict() == {"mean": [1.0, 2.0], "std": [1.0, 1.0]}


# ---------------------------------------------------------------------------------- bins at their edges
EDGES = np.linspace(-1, 1, 256 + 1)[:-1]  # openpi PaligemmaTokenizer / LeRobot Pi05PrepareStateTokenizer


def reference_bins(normalized: np.ndarray) -> np.ndarray:
    return np.digitize(normalized, bins=EDGES) - 1


def edge_states(q01: np.ndarray, span: np.ndarray, dtype: type, ulps: int = 3) -> np.ndarray:
    """For every bin edge and dimension, the raw states that normalize onto and around it: the float64 preimage
    of the edge and its neighbours ``ulps`` representable values either side in ``dtype``."""
    exact = q01[None, :] + (EDGES[:, None] + 1.0) / 2.0 * span[None, :]  # [256, D]
    rows = []
    for k in range(-ulps, ulps + 1):
        x = exact.astype(dtype)
        step = np.inf if k > 0 else -np.inf
        for _ in range(abs(k)):
            x = np.nextafter(x, step).astype(dtype)
        rows.append(x)
    return np.concatenate(rows)


def test_lerobot_state_bins_match_lerobot_at_every_edge() -> None:
    """LeRobot: NormalizerProcessorStep on float32 tensors (``2.0 * (x - q01) / denom - 1.0``), then
    ``np.digitize`` of that float32 array."""
    rng = np.random.default_rng(0)
    q01 = rng.uniform(-3, 0, 8).astype(np.float32).astype(np.float64)  # LeRobot stores float32 statistics
    q99 = (q01 + rng.uniform(0.5, 4, 8)).astype(np.float32).astype(np.float64)
    q99[7] = q01[7]  # a constant dimension: LeRobot's eps replaces the zero range
    stats = {"q01": q01, "q99": q99, "mean": q01, "std": q99 - q01}
    norm = Normalizer(parse_norm_stats({"state": stats, "actions": stats}), formula="lerobot", eps=1e-8)
    states = edge_states(q01, q99 - q01, np.float32)

    t = torch.as_tensor(states, dtype=torch.float32)
    lo, hi = torch.as_tensor(q01, dtype=torch.float32), torch.as_tensor(q99, dtype=torch.float32)
    denom = hi - lo
    denom = torch.where(denom == 0, torch.tensor(1e-8, dtype=torch.float32), denom)
    expected = reference_bins((2.0 * (t - lo) / denom - 1.0).numpy())

    ours = norm.normalize_state(states)
    assert ours.dtype == np.float32
    got = np.stack([discretize_state(row) for row in ours])
    assert np.array_equal(got, expected)
    # The search reaches states where float64 arithmetic would pick another bin (so it can tell).
    in_float64 = reference_bins(2.0 * (states.astype(np.float64) - q01) / np.where(q99 == q01, 1e-8, q99 - q01) - 1.0)
    assert (in_float64 != expected).sum() > 10


def test_openpi_state_bins_match_openpi_at_every_edge() -> None:
    """openpi: ``Normalize`` on the float64 state (``(x - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0``), then
    ``np.digitize`` of the float64 result: no float32 rounding in between."""
    rng = np.random.default_rng(1)
    q01 = rng.uniform(-3, 0, 8)
    q99 = q01 + rng.uniform(0.5, 4, 8)
    stats = {"q01": q01, "q99": q99, "mean": q01, "std": q99 - q01}
    norm = Normalizer(parse_norm_stats({"state": stats, "actions": stats}), formula="openpi")
    states = edge_states(q01, q99 - q01 + 1e-6, np.float64)

    expected = reference_bins((states - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0)
    got = np.stack([discretize_state(row) for row in norm.normalize_state(states)])
    assert np.array_equal(got, expected)
    rounded = reference_bins(((states - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0).astype(np.float32))
    assert (rounded != expected).sum() > 10
