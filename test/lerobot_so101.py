"""A tiny LeRobot pi05 checkpoint for an SO-101 (six joints, front and wrist cameras), its parameters file, and the
runtime's chunks for one observation: what LeRobot's clients served by ``oxygen-serve --protocol lerobot`` must get."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from layouts import REF_TINY, lerobot_folder, random_model, stats_arrays
from lerobot_shapes import SO101_JOINTS
from oxygen_ros.model.tokenizers.tokenizer import train_tokenizer
from oxygen_ros.runtime import PolicyRuntime
from oxygen_ros.serve.cli import load_config

TASK = "put the cube in the box"
SEED = 3


def so101_params(tmp_path: Path) -> Path:
    """A tiny LeRobot pi05 checkpoint with an SO-101's six joints and front/wrist cameras, and its parameters
    file (config/robots/so101.yaml's embodiment and joints)."""
    train_tokenizer(tmp_path / "tok" / "tokenizer.model", 400)
    model = random_model(REF_TINY.replace(action_dim=6))
    checkpoint = lerobot_folder(tmp_path / "pi05_so101", model, stats_arrays(6, -60, 60, seed=1),
                                stats_arrays(6, -60, 60, seed=2),
                                cameras=("observation.images.front", "observation.images.wrist"))  # fmt: skip
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({
        "checkpoint": str(checkpoint), "tokenizer": str(tmp_path / "tok" / "tokenizer.model"), "embodiment": "none",
        "joint_names": list(SO101_JOINTS), "engine_mode": "oxygen", "num_threads": 1, "kv_budget_mb": 16.0,
        "seed": SEED,
    }))  # fmt: skip
    return params


def expected_chunks(params: Path, observation: dict, robots: int) -> list[np.ndarray]:
    """The runtime's chunks for one observation seen by ``robots`` robots in one tick (robot i: seed + i)."""
    runtime = PolicyRuntime.load(load_config(str(params))[0])
    names = [""] + [f"robot{i}" for i in range(1, robots)]
    for i, name in enumerate(names[1:], start=1):
        runtime.add_robot(name)
        runtime.engine.robot(name).generator.manual_seed(SEED + i)
    state = np.float32([observation[f"{j}.pos"] for j in SO101_JOINTS]).astype(np.float64)
    frames = {name: runtime.make_frame([observation["front"], observation["wrist"]], state, TASK, 0, 0) for name in names}
    results = runtime.step_many(frames)
    return [results[name].actions for name in names]
