"""Embodiment adapters against the references' formulas, written out here from their sources:

* ALOHA: openpi ``src/openpi/policies/aloha_policy.py`` (``_joint_flip_mask``, ``_gripper_to_angular``,
  ``_gripper_from_angular``, ``AlohaOutputs`` keeps 14 dims).
* DROID: openpi ``policies/droid_policy.py`` (``DroidOutputs`` keeps 8) and ``examples/droid/main.py`` (gripper
  binarized at 0.5, every dimension clipped to [-1, 1]).
* LIBERO: openpi ``policies/libero_policy.py`` (``LiberoOutputs`` keeps 7).

Then through ``PolicyRuntime`` with an openpi folder: the prompt digitizes the adapted state and the robot
receives the adapted actions.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from layouts import REF_TINY, openpi_converted, openpi_norm_stats, random_model, stats_arrays
from oxygen_ros.embodiment import AdapterError, adapter_for_asset, make_adapter
from oxygen_ros.model.tokenizers.tokenizer import train_tokenizer
from oxygen_ros.runtime import PolicyRuntime, RuntimeConfig, RuntimeLoadError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------ openpi's ALOHA, written out
def ref_flip() -> np.ndarray:
    return np.array([1, -1, -1, 1, 1, 1, 1, 1, -1, -1, 1, 1, 1, 1])


def ref_gripper_to_angular(value: np.ndarray) -> np.ndarray:
    value = value * (0.05800 - 0.01844) + 0.01844
    value = np.arcsin(np.clip((0.022**2 + value**2 - 0.036**2) / (2 * 0.022 * value), -1.0, 1.0))
    return (value - 0.5476) / (1.6296 - 0.5476)


def ref_gripper_from_angular(value: np.ndarray) -> np.ndarray:
    value = value + 0.5476
    return (value - -0.6213) / (1.4910 - -0.6213)


def ref_aloha_state(state: np.ndarray) -> np.ndarray:
    state = ref_flip() * state
    state[[6, 13]] = ref_gripper_to_angular(state[[6, 13]])
    return state


def ref_aloha_actions(actions: np.ndarray) -> np.ndarray:
    actions = ref_flip() * np.asarray(actions[:, :14])
    actions[:, [6, 13]] = ref_gripper_from_angular(actions[:, [6, 13]])
    return actions


ALOHA_STATE = np.array([0.1, -0.8, 0.9, 0.05, 0.3, -0.2, 0.4, -0.1, -0.7, 1.1, 0.0, 0.2, 0.1, 0.8])


def test_aloha_adapt_to_pi_matches_openpi() -> None:
    adapter = make_adapter("aloha")
    np.testing.assert_allclose(adapter.state_in(ALOHA_STATE), ref_aloha_state(ALOHA_STATE.copy()), rtol=0, atol=1e-15)
    actions = np.random.default_rng(0).uniform(-1, 1, (5, 16))
    np.testing.assert_allclose(adapter.actions_out(actions), ref_aloha_actions(actions.copy()), rtol=0, atol=1e-15)
    assert adapter.actions_out(actions).shape == (5, 14)
    # Two joints per arm move the other way; the grippers change space (the test can tell).
    assert adapter.state_in(ALOHA_STATE)[1] == 0.8 and abs(adapter.state_in(ALOHA_STATE)[6] - 0.4) > 0.05
    plain = make_adapter("aloha", {"adapt_to_pi": False})
    np.testing.assert_array_equal(plain.state_in(ALOHA_STATE), ALOHA_STATE)
    np.testing.assert_array_equal(plain.actions_out(actions), actions[:, :14])


# ------------------------------------------------------------------------------------------- DROID
def test_droid_matches_openpis_client() -> None:
    chunk = np.array([[0.2, -1.7, 0.0, 3.0, -0.4, 0.9, 1.2, 0.51, 9.0], [1.5, 0.1, -0.2, 0.0, 0.0, -2.0, 0.3, 0.5, 9.0]])
    expected = []
    for action in chunk[:, :8]:  # DroidOutputs, then examples/droid/main.py per executed action
        action = np.concatenate([action[:-1], np.ones((1,))]) if action[-1].item() > 0.5 else np.concatenate([action[:-1], np.zeros((1,))])
        expected.append(np.clip(action, -1, 1))
    adapter = make_adapter("droid")
    np.testing.assert_array_equal(adapter.actions_out(chunk), np.stack(expected))
    state = np.array([0.1, 0.2, 0.3, -2.0, 0.0, 1.5, 0.7, 0.04])  # 7 joint positions + gripper position, as sent
    np.testing.assert_array_equal(adapter.state_in(state), state)
    raw = make_adapter("droid", {"gripper_threshold": None, "clip": False}).actions_out(chunk)
    np.testing.assert_array_equal(raw, chunk[:, :8])


# ------------------------------------------------------------------------------------------ LIBERO
def test_libero_keeps_seven_dims() -> None:
    adapter = make_adapter("libero")
    chunk = np.random.default_rng(1).normal(size=(10, 32))
    np.testing.assert_array_equal(adapter.actions_out(chunk), chunk[:, :7])
    with pytest.raises(AdapterError, match="takes a state of 8 values, got 7"):
        adapter.state_in(np.zeros(7))


# --------------------------------------------------------------------------------------------- units
def test_scale_offset_both_ways_and_its_refusals() -> None:
    adapter = make_adapter("scale_offset", {"scale": [180 / math.pi, 180 / math.pi, 100.0], "offset": [0.0, 10.0, 0.0]})
    state = np.array([math.pi / 2, -math.pi / 4, 0.3])
    np.testing.assert_allclose(adapter.state_in(state), [90.0, -35.0, 30.0])
    np.testing.assert_allclose(adapter.actions_out(np.array([[90.0, -35.0, 30.0, 7.0]])), [state])
    for options, message in [({}, "needs 'scale'"), ({"scale": [1.0, 0.0]}, r"scale is 0 at dims \[1\]"),
                             ({"scale": [1.0], "offset": [0.0, 1.0]}, "scale has 1 values and offset 2"),
                             ({"scale": "abc"}, "non-empty list of numbers")]:  # fmt: skip
        with pytest.raises(AdapterError, match=message):
            make_adapter("scale_offset", options)
    with pytest.raises(AdapterError, match="unknown embodiment 'ur5'"):
        make_adapter("ur5")
    with pytest.raises(AdapterError, match=r"aloha has no options \['clip'\]"):
        make_adapter("aloha", {"clip": True})


def test_embodiment_named_by_an_openpi_asset_id() -> None:
    assert adapter_for_asset("/ckpt/pi05_aloha/assets/trossen/norm_stats.json") == "aloha"
    assert adapter_for_asset("/ckpt/pi05_droid/assets/droid/norm_stats.json") == "droid"
    assert adapter_for_asset("/c/assets/physical-intelligence/libero/norm_stats.json") == "libero"
    assert adapter_for_asset("/c/assets/my_robot/norm_stats.json") is None and adapter_for_asset(None) is None


# ----------------------------------------------------------------------- through the runtime (openpi)
H = REF_TINY.action_horizon


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("embodiment")
    tok = root / "tok" / "tokenizer.model"
    sp = train_tokenizer(tok, 400)
    model = random_model(REF_TINY.replace(action_dim=16))
    state, action = stats_arrays(14, -1.5, 2.5, seed=3), stats_arrays(14, -1.0, 1.5, seed=4)
    folder = openpi_converted(root / "pi05_aloha", model, openpi_norm_stats(state, action), "trossen")
    return SimpleNamespace(root=root, tok=tok, sp=sp, model=model, state=state, action=action, folder=folder)


def runtime(env: SimpleNamespace, checkpoint: Path, **overrides: Any) -> PolicyRuntime:
    cfg = RuntimeConfig(checkpoint=str(checkpoint), tokenizer=str(env.tok), tasks=[], engine_mode="action_only",
                        kv_budget_mb=16.0, num_threads=1, prompt_format="pi05_state", **overrides)  # fmt: skip
    return PolicyRuntime.load(cfg)


def test_aloha_checkpoint_prompt_and_actions_through_the_runtime(env: SimpleNamespace) -> None:
    """openpi order: AlohaInputs → Normalize → prompt; model → Unnormalize → AlohaOutputs (auto: asset 'trossen')."""
    rt = runtime(env, env.folder, embodiment="auto")
    assert rt.adapter.name == "aloha" and rt.action_dim == 14 and "embodiment aloha" in rt.describe()
    camera = np.random.default_rng(0).integers(0, 256, (40, 40, 3), dtype=np.uint8)
    frame = rt.make_frame([camera], ALOHA_STATE, "fold the towel", stamp_ns=1)
    q01, q99 = env.state["q01"], env.state["q99"]
    normalized = (ref_aloha_state(ALOHA_STATE.copy()) - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0
    bins = " ".join(map(str, np.digitize(normalized, bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1))
    assert frame.prompt_tokens.tolist() == env.sp.encode(f"Task: fold the towel, State: {bins};\nAction: ", add_bos=True)
    result = rt.step(frame)
    raw = result.tick.actions.astype(np.float64)[:, :14]
    aq01, aq99 = env.action["q01"], env.action["q99"]
    expected = ref_aloha_actions((raw + 1.0) / 2.0 * (aq99 - aq01 + 1e-6) + aq01)
    assert result.actions.shape == (H, 14)
    np.testing.assert_allclose(result.actions, expected, rtol=0, atol=2e-5)
    plain = runtime(env, env.folder).step(rt.make_frame([camera], ALOHA_STATE, "fold the towel", stamp_ns=1))
    assert np.abs(plain.actions - expected).max() > 1e-2  # without the adapter the robot would get other values


def test_an_adapter_for_another_robot_is_refused_at_start(env: SimpleNamespace) -> None:
    with pytest.raises(RuntimeLoadError, match="embodiment droid takes a state of 8 values, but the statistics describe 14"):
        runtime(env, env.folder, embodiment="droid")
    with pytest.raises(RuntimeLoadError, match="embodiment scale_offset sends 20 action dims"):
        runtime(env, env.folder, embodiment="scale_offset", unit_scale=[1.0] * 20)
    with pytest.raises(RuntimeLoadError, match="embodiment must be one of"):
        runtime(env, env.folder, embodiment="ur5")
