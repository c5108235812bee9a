"""The actions openpi's client receives from oxygen-serve equal the runtime's chunk (what the node publishes)
for the same observation and noise seed: DROID, ALOHA and LIBERO keys, small openpi-layout checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from layouts import REF_TINY, openpi_converted, openpi_norm_stats, random_model, stats_arrays
from openpi_client_env import client_python, oxygen_serve, run_client
from oxygen_ros.model.tokenizers.tokenizer import train_tokenizer
from oxygen_ros.runtime import PolicyRuntime
from oxygen_ros.serve.cli import load_config

PROMPT = "pick up the red block"


def _images(rng: np.random.Generator, h: int, w: int, chw: bool = False) -> np.ndarray:
    image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    return np.ascontiguousarray(image.transpose(2, 0, 1)) if chw else image


def _case(layout: str, rng: np.random.Generator) -> tuple[str, int, dict, list, np.ndarray]:
    """(asset id, dims, the client's observation, the images in the model's slot order, the state)."""
    if layout == "droid":
        base, wrist, joints, grip = _images(rng, 180, 320), _images(rng, 180, 320), rng.uniform(-1, 1, 7), rng.uniform(0, 1, 1)
        obs = {"observation/exterior_image_1_left": base, "observation/wrist_image_left": wrist,
               "observation/joint_position": joints, "observation/gripper_position": grip, "prompt": PROMPT}
        return "droid", 8, obs, [base, wrist, None], np.concatenate([joints, grip])
    if layout == "libero":
        base, wrist, state = _images(rng, 224, 224), _images(rng, 224, 224), rng.uniform(-1, 1, 8)
        obs = {"observation/image": base, "observation/wrist_image": wrist, "observation/state": state, "prompt": PROMPT}
        return "physical-intelligence/libero", 8, obs, [base, wrist, None], state
    cams = {c: _images(rng, 120, 160, chw=True) for c in ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")}
    state = rng.uniform(-0.5, 0.5, 14)
    obs = {"state": state, "prompt": PROMPT, **{f"images.{c}": v for c, v in cams.items()}}
    hwc = {c: v.transpose(1, 2, 0) for c, v in cams.items()}
    return "trossen", 14, obs, [hwc["cam_high"], hwc["cam_left_wrist"], hwc["cam_right_wrist"]], state


@pytest.mark.parametrize("layout", ["droid", "aloha", "libero"])
def test_client_actions_equal_the_runtime_chunk(tmp_path: Path, layout: str) -> None:
    asset, dims, obs, slots, state = _case(layout, np.random.default_rng(7))
    train_tokenizer(tmp_path / "tok" / "tokenizer.model", 400)
    stats = openpi_norm_stats(stats_arrays(dims, -1.5, 1.5, seed=1), stats_arrays(dims, -2.0, 2.0, seed=2))
    checkpoint = openpi_converted(tmp_path / "ckpt", random_model(REF_TINY.replace(action_dim=dims)), stats, asset)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({
        "checkpoint": str(checkpoint), "tokenizer": str(tmp_path / "tok" / "tokenizer.model"), "embodiment": "auto",
        "engine_mode": "oxygen", "num_threads": 1, "kv_budget_mb": 16.0, "seed": 3,
    }))  # fmt: skip
    np.savez(tmp_path / "obs.npz", **obs)
    with oxygen_serve(params, "--max-clients", "2", log_dir=tmp_path) as served:
        out = run_client(client_python("0.1.2"), "infer_file", str(served.port), str(tmp_path / "obs.npz"), str(tmp_path / "a.npy"))
    received = np.load(tmp_path / "a.npy")

    runtime = PolicyRuntime.load(load_config(str(params))[0])  # the node's runtime, its first frame
    assert runtime.adapter.name == layout
    expected = runtime.step(runtime.make_frame(slots, state, PROMPT, 0, 0)).actions
    assert out["dtype"] == "<f4" and received.shape == expected.shape == (REF_TINY.action_horizon, runtime.action_dim)
    np.testing.assert_allclose(received, expected, rtol=0, atol=1e-5)
    assert np.ptp(received) > 1e-3  # a real chunk, not a constant
