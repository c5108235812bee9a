"""Write checkpoint folders the way openpi and LeRobot write them (tiny sizes), for the checkpoint tests.

* ``lerobot_folder``: ``PI05Policy.save_pretrained`` + ``make_pi05_pre_post_processors(...).save_pretrained``:
  model.safetensors, a draccus ``config.json`` (``"type": "pi05"``), ``policy_preprocessor.json`` /
  ``policy_postprocessor.json`` with LeRobot's pi05 step lists, and the (un)normalizer step files
  ``policy_{pre,post}processor_step_<i>_{normalizer,unnormalizer}_processor.safetensors`` holding flat float32
  tensors ``<feature>.<stat>`` (LeRobot ``_NormalizationMixin.state_dict``).
* ``openpi_converted``: ``examples/convert_jax_model_to_pytorch.py``: model.safetensors, config.json with
  action_dim/action_horizon/variants/precision, and assets copied to ``assets/<asset_id>/norm_stats.json``
  (``{"norm_stats": {"state": {...}, "actions": {...}}}``, openpi ``normalize.save``).
* ``openpi_training``: ``scripts/train_pytorch.py``: model.safetensors, optimizer.pt, metadata.pt, assets/.

Sizes a real config.json cannot express go in ``oxygen_config.json`` (written by ``save_checkpoint``; the
real tools never read it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from oxygen_ros.model.checkpoints.checkpoint import save_checkpoint
from oxygen_ros.model.network.config import TINY, ModelConfig
from oxygen_ros.model.network.vla import Pi05Model

# The references' prefix attention (bidirectional), at the tiny size.
REF_TINY = TINY.replace(prefix_attention="bidirectional")


def random_model(config: ModelConfig = REF_TINY, seed: int = 0) -> Pi05Model:
    model = Pi05Model(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model.eval()


def stats_arrays(dim: int, low: float, high: float, seed: int) -> dict[str, np.ndarray]:
    """All the statistics LeRobot's dataset stats carry, consistent with each other."""
    rng = np.random.default_rng(seed)
    q01 = low + rng.uniform(0, 0.2, dim)
    q99 = high - rng.uniform(0, 0.2, dim)
    return {
        "mean": (q01 + q99) / 2, "std": (q99 - q01) / 4, "min": q01 - 0.1, "max": q99 + 0.1,
        "q01": q01, "q99": q99, "q10": q01 + 0.05, "q90": q99 - 0.05, "count": np.array([1000.0]),
    }  # fmt: skip


def _tensors(feature: str, stats: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {f"{feature}.{k}": torch.as_tensor(np.asarray(v), dtype=torch.float32) for k, v in stats.items()}


def lerobot_folder(
    directory: Path,
    model: Pi05Model,
    state: dict[str, np.ndarray],
    action: dict[str, np.ndarray],
    *,
    cameras: tuple[str, ...] = ("observation.images.top", "observation.images.left_wrist", "observation.images.right_wrist"),
    norm_map: dict[str, str] | None = None,
    relative: dict[str, Any] | None = None,
    n_action_steps: int | None = None,
    processors: bool = True,
) -> Path:
    save_checkpoint(model, directory, "lerobot")
    cfg = model.config
    config = json.loads((directory / "config.json").read_text())
    state_dim, action_dim = len(state["q01"]), len(action["q01"])
    size = cfg.vision.image_size
    norm_map = norm_map or {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"}
    inputs = {name: {"type": "VISUAL", "shape": [3, size, size]} for name in cameras}
    inputs["observation.state"] = {"type": "STATE", "shape": [state_dim]}
    outputs = {"action": {"type": "ACTION", "shape": [action_dim]}}
    config.update(
        input_features=inputs, output_features=outputs, normalization_mapping=norm_map,
        n_action_steps=n_action_steps or cfg.action_horizon, device="cpu", use_amp=False,
        use_relative_actions=bool(relative and relative["enabled"]),
        relative_exclude_joints=(relative or {}).get("exclude_joints", ["gripper"]),
        action_feature_names=(relative or {}).get("action_names"),
    )  # fmt: skip
    (directory / "config.json").write_text(json.dumps(config, indent=4))
    if not processors:
        return directory
    features = {**inputs, **outputs}
    step_config = {"eps": 1e-8, "features": features, "norm_map": norm_map}
    rel = relative or {"enabled": False, "exclude_joints": ["gripper"], "action_names": None}
    pre_file = "policy_preprocessor_step_3_normalizer_processor.safetensors"
    pre = {
        "name": "policy_preprocessor",
        "steps": [
            {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
            {"registry_name": "to_batch_processor", "config": {}},
            {"registry_name": "relative_actions_processor", "config": rel},
            {"registry_name": "normalizer_processor", "config": step_config, "state_file": pre_file},
            {"registry_name": "pi05_prepare_state_tokenizer_processor_step",
             "config": {"max_state_dim": 32, "task_key": "task", "include_state_in_prompt": True}},
            {"registry_name": "tokenizer_processor",
             "config": {"max_length": cfg.max_prompt_tokens, "task_key": "task", "padding_side": "right",
                        "padding": "max_length", "truncation": True, "tokenizer_name": "google/paligemma-3b-pt-224"}},
            {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
        ],
    }  # fmt: skip
    post_file = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
    post = {
        "name": "policy_postprocessor",
        "steps": [
            {"registry_name": "unnormalizer_processor", "config": {"eps": 1e-8, "features": outputs, "norm_map": norm_map},
             "state_file": post_file},
            {"registry_name": "absolute_actions_processor", "config": {"enabled": rel["enabled"]}},
            {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
        ],
    }  # fmt: skip
    image_stats = {"mean": np.full((3, 1, 1), 0.5), "std": np.full((3, 1, 1), 0.2)}
    pre_state = {**_tensors("observation.state", state), **_tensors("action", action)}
    for name in cameras:
        pre_state.update(_tensors(name, image_stats))
    save_file(pre_state, str(directory / pre_file))
    save_file(_tensors("action", action), str(directory / post_file))
    (directory / "policy_preprocessor.json").write_text(json.dumps(pre, indent=2))
    (directory / "policy_postprocessor.json").write_text(json.dumps(post, indent=2))
    return directory


def openpi_norm_stats(state: dict[str, np.ndarray], actions: dict[str, np.ndarray]) -> dict[str, Any]:
    """openpi's norm_stats.json payload (NormStats fields mean, std, q01, q99)."""
    pick = ("mean", "std", "q01", "q99")
    return {"norm_stats": {"state": {k: state[k].tolist() for k in pick}, "actions": {k: actions[k].tolist() for k in pick}}}


def write_assets(assets: Path, asset_id: str, payload: dict[str, Any]) -> Path:
    path = assets / asset_id / "norm_stats.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2))
    return path


def openpi_converted(directory: Path, model: Pi05Model, payload: dict[str, Any] | None, asset_id: str = "trossen",
                     in_parent: bool = False) -> Path:  # fmt: skip
    save_checkpoint(model, directory, "openpi")
    if payload is not None:
        write_assets((directory.parent if in_parent else directory) / "assets", asset_id, payload)
    return directory


def openpi_training(directory: Path, model: Pi05Model, payload: dict[str, Any], asset_id: str = "trossen") -> Path:
    save_checkpoint(model, directory, "openpi")
    (directory / "config.json").unlink()  # train_pytorch.py writes none
    torch.save({"state": {}, "param_groups": [{"lr": 2.5e-5, "params": []}]}, directory / "optimizer.pt")
    torch.save({"global_step": 100, "config": {"name": "pi05_test", "batch_size": 2}, "timestamp": time.time()},
               directory / "metadata.pt")  # fmt: skip
    write_assets(directory / "assets", asset_id, payload)
    return directory
