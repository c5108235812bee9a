"""The robot receives what openpi or LeRobot would send for their own checkpoints.

Each test writes a folder the way the reference writes it (``layouts.py``), runs ``PolicyRuntime`` on a known
observation, and checks the model's inputs (prompt ids, pixels) and the published actions against the
reference's formulas written out here (LeRobot ``normalize_processor.py`` / ``relative_action_processor.py`` /
``processor_pi05.py`` / ``vla_utils.resize_with_pad_torch``; openpi ``transforms.py`` / ``tokenizer.py`` /
``openpi_client.image_tools``). The model's own normalized chunk (``result.tick.actions``) is the common
input of both sides: the model math is checked against the references elsewhere (test_model.py).
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file, save_file

from layouts import (
    REF_TINY, lerobot_folder, openpi_converted, openpi_norm_stats, openpi_training, random_model, stats_arrays, write_assets,
)  # fmt: skip
from oxygen_ros.model.tokenizers.tokenizer import train_tokenizer
from oxygen_ros.runtime import PolicyRuntime, RuntimeConfig, RuntimeLoadError

H = REF_TINY.action_horizon
STATE_DIM, ACTION_DIM = 7, 7
ROBOT_STATE = np.array([0.3, -1.9, 0.05, 2.4, -0.7, 1.1, 0.02])  # joint 1 is below its q01: bin -1


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("ckpts")
    tok_path = root / "tok" / "tokenizer.model"
    tokenizer = train_tokenizer(tok_path, 400)
    state = stats_arrays(STATE_DIM, -1.5, 2.5, seed=1)
    action = stats_arrays(ACTION_DIM, 100.0, 104.0, seed=2)  # robot units far from [-1, 1]
    return SimpleNamespace(root=root, tok=tok_path, sp=tokenizer, state=state, action=action, model=random_model())


def runtime(env: SimpleNamespace, checkpoint: Path, **overrides: Any) -> PolicyRuntime:
    cfg = RuntimeConfig(checkpoint=str(checkpoint), tokenizer=str(env.tok), tasks=[], engine_mode="action_only",
                        kv_budget_mb=16.0, num_threads=1)  # fmt: skip
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return PolicyRuntime.load(cfg)


def camera(h: int = 30, w: int = 50, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def bins(normalized: np.ndarray) -> str:
    """openpi PaligemmaTokenizer / LeRobot Pi05PrepareStateTokenizerProcessorStep."""
    return " ".join(map(str, np.digitize(normalized, bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1))


def state_prompt(task: str, normalized: np.ndarray) -> str:
    cleaned = task.strip().replace("_", " ").replace("\n", " ")
    return f"Task: {cleaned}, State: {bins(normalized)};\nAction: "


# LeRobot _NormalizationMixin._apply_transform (float32 tensors, eps replaces a zero range)
def lerobot_quantile(x: np.ndarray, s: dict[str, np.ndarray], inverse: bool, eps: float = 1e-8) -> np.ndarray:
    t = torch.as_tensor(x, dtype=torch.float32)
    q01, q99 = (torch.as_tensor(s[k], dtype=torch.float32) for k in ("q01", "q99"))
    denom = q99 - q01
    denom = torch.where(denom == 0, torch.tensor(eps, dtype=torch.float32), denom)
    out = (t + 1.0) * denom / 2.0 + q01 if inverse else 2.0 * (t - q01) / denom - 1.0
    return out.numpy().astype(np.float64)


# openpi transforms.Normalize / Unnormalize with use_quantiles (stats sliced to the data's width)
def openpi_quantile(x: np.ndarray, s: dict[str, np.ndarray], inverse: bool) -> np.ndarray:
    q01, q99 = np.asarray(s["q01"]), np.asarray(s["q99"])
    if inverse:  # narrower statistics: the remaining model dims pass through (the robot's outputs cut them)
        if (dim := q01.shape[-1]) < x.shape[-1]:
            return np.concatenate([(x[..., :dim] + 1.0) / 2.0 * (q99 - q01 + 1e-6) + q01, x[..., dim:]], axis=-1)
        return (x + 1.0) / 2.0 * (q99 - q01 + 1e-6) + q01
    q01, q99 = q01[: x.shape[-1]], q99[: x.shape[-1]]
    return (x - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0


def lerobot_pixels(image: np.ndarray, size: int) -> torch.Tensor:
    """LeRobot _preprocess_images: float image /255, resize_with_pad_torch (bilinear, no antialias), *2-1."""
    x = torch.from_numpy(image.astype(np.float32) / 255.0).permute(2, 0, 1)[None]
    h, w = image.shape[:2]
    ratio = max(w / size, h / size)
    rh, rw = int(h / ratio), int(w / ratio)
    x = F.interpolate(x, size=(rh, rw), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    ph0, rem_h = divmod(size - rh, 2)
    pw0, rem_w = divmod(size - rw, 2)
    x = F.pad(x, (pw0, pw0 + rem_w, ph0, ph0 + rem_h), mode="constant", value=0.0)
    return x[0] * 2.0 - 1.0


def openpi_pixels(image: np.ndarray, size: int) -> torch.Tensor:
    """openpi_client image_tools.resize_with_pad (PIL bilinear, zero padding), then uint8 / 255 * 2 - 1."""
    pil = Image.fromarray(image)
    w, h = pil.size
    ratio = max(w / size, h / size)
    rh, rw = int(h / ratio), int(w / ratio)
    resized = pil.resize((rw, rh), resample=Image.BILINEAR)
    canvas = Image.new(resized.mode, (size, size), 0)
    canvas.paste(resized, (max(0, int((size - rw) / 2)), max(0, int((size - rh) / 2))))
    return torch.from_numpy(np.asarray(canvas).astype(np.float32)).permute(2, 0, 1) / 255.0 * 2.0 - 1.0


# ---------------------------------------------------------------------------------------- LeRobot pi05
@pytest.fixture(scope="module")
def lerobot(env: SimpleNamespace) -> Path:
    return lerobot_folder(env.root / "lerobot_pi05", env.model, env.state, env.action)


def test_lerobot_folder_sends_what_lerobot_sends(env: SimpleNamespace, lerobot: Path) -> None:
    """Items 1, 4, 5, 6: processor statistics, state in the prompt with bin -1, bilinear resize, unnormalize."""
    rt = runtime(env, lerobot)
    assert rt.normalizer is not None and rt.normalizer.formula == "lerobot"
    assert (rt.prompt_format, rt.resize_mode) == ("pi05_state", "bilinear")
    images = [camera(120, 200, 0), camera(40, 20, 1), None]  # shrunk (antialiasing would show) and enlarged
    frame = rt.make_frame(images, ROBOT_STATE, "pick_up the\ncup ", stamp_ns=1)
    # Prompt: LeRobot normalizer (QUANTILES), then digitized without clipping.
    norm = lerobot_quantile(ROBOT_STATE, env.state, inverse=False)
    assert norm[1] < -1.0 and bins(norm).split()[1] == "-1"
    expected_ids = env.sp.encode(state_prompt("pick_up the\ncup ", norm), add_bos=True)
    assert frame.prompt_tokens.tolist() == expected_ids
    # Pixels: bilinear without antialiasing on [0, 1] floats.
    size = REF_TINY.vision.image_size
    for slot in (0, 1):
        torch.testing.assert_close(frame.images[slot], lerobot_pixels(images[slot], size), atol=1e-6, rtol=0)
    assert frame.image_mask.tolist() == [True, True, False]
    # Actions: the chunk cut to the action feature's width, then LeRobot's inverse quantile formula.
    result = rt.step(frame)
    raw = result.tick.actions
    assert raw.shape == (H, REF_TINY.action_dim)
    expected = lerobot_quantile(raw[:, :ACTION_DIM], env.action, inverse=True)
    assert result.actions.shape == (H, ACTION_DIM)
    np.testing.assert_allclose(result.actions, expected, rtol=0, atol=2e-5)
    assert 95 < result.actions.mean() < 110  # robot units, not the model's [-1, 1]


def test_lerobot_modes_come_from_the_norm_map(env: SimpleNamespace) -> None:
    """MEAN_STD actions (inverse without eps) and a zero-range state dimension (eps in its place)."""
    state = {k: v.copy() for k, v in env.state.items()}
    state["q99"][2] = state["q01"][2]  # a joint that never moved in the dataset
    folder = lerobot_folder(env.root / "lerobot_modes", env.model, state, env.action,
                            norm_map={"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "MEAN_STD"})  # fmt: skip
    rt = runtime(env, folder)
    frame = rt.make_frame([camera()], ROBOT_STATE, "wipe", stamp_ns=1)
    norm = lerobot_quantile(ROBOT_STATE, state, inverse=False)
    assert frame.prompt_tokens.tolist() == env.sp.encode(state_prompt("wipe", norm), add_bos=True)
    result = rt.step(frame)
    a = result.tick.actions[:, :ACTION_DIM].astype(np.float64)
    expected = a * env.action["std"] + env.action["mean"]  # LeRobot: tensor * std + mean
    np.testing.assert_allclose(result.actions, expected, rtol=1e-6, atol=1e-5)


def test_lerobot_chunk_length_and_n_action_steps(env: SimpleNamespace) -> None:
    """Item 2: chunk_size is H; n_action_steps is read for the runtime; another horizon is refused."""
    model = random_model(REF_TINY.replace(action_horizon=12), seed=5)
    folder = lerobot_folder(env.root / "lerobot_h12", model, env.state, env.action, n_action_steps=5)
    rt = runtime(env, folder)
    assert rt.model_config.action_horizon == 12 and rt.checkpoint_info.chunk_length == 12
    assert rt.checkpoint_info.n_action_steps == 5
    result = rt.step(rt.make_frame([camera()], ROBOT_STATE, "stack", stamp_ns=1))
    assert result.actions.shape == (12, ACTION_DIM)
    assert runtime(env, folder, horizon=12).model_config.action_horizon == 12
    with pytest.raises(RuntimeLoadError, match=r"horizon 10 differs from the checkpoint's chunk length 12"):
        runtime(env, folder, horizon=10)


def test_lerobot_relative_actions(env: SimpleNamespace) -> None:
    """Item 3: use_relative_actions: the state is added back to every joint but the excluded gripper."""
    names = ["j1", "j2", "j3", "j4", "j5", "j6", "gripper"]
    folder = lerobot_folder(env.root / "lerobot_rel", env.model, env.state, env.action,
                            relative={"enabled": True, "exclude_joints": ["gripper"], "action_names": names})  # fmt: skip
    rt = runtime(env, folder)
    result = rt.step(rt.make_frame([camera()], ROBOT_STATE, "open the drawer", stamp_ns=1))
    absolute = lerobot_quantile(result.tick.actions[:, :ACTION_DIM], env.action, inverse=True)
    mask = np.array([True] * 6 + [False])  # RelativeActionsProcessorStep._build_mask
    expected = absolute + np.where(mask, ROBOT_STATE[:ACTION_DIM], 0.0)  # to_absolute_actions
    np.testing.assert_allclose(result.actions, expected, rtol=0, atol=2e-5)
    assert "delta actions on dims [0..5] of 7" in rt.describe()  # the dims that exist, not a 32-wide mask


def test_lerobot_camera_feature_names_and_order(env: SimpleNamespace, tmp_path: Path) -> None:
    """Item 11: slots follow input_features; camera topics can be given by feature name."""
    from oxygen_ros.interface import settings as S

    model = random_model(REF_TINY.replace(num_image_slots=2), seed=7)
    folder = lerobot_folder(env.root / "lerobot_cams", model, env.state, env.action,
                            cameras=("observation.images.wrist", "observation.images.top"))  # fmt: skip
    rt = runtime(env, folder)
    assert rt.image_slot_names == ("observation.images.wrist", "observation.images.top")
    values = {"checkpoint": str(folder), "tokenizer": str(env.tok), "joint_names": [f"j{i}" for i in range(7)],
              "camera_topics": ["/cam/top", "/cam/wrist"], "camera_features": ["top", "observation.images.wrist"],
              "camera_optional": [False, True]}  # fmt: skip
    settings, _ = S.settings_from_values(values)
    assert settings.camera_topics == ("/cam/wrist", "/cam/top") and settings.camera_optional == (True, False)
    only_top = {**values, "camera_topics": ["/cam/top"], "camera_features": ["top"], "camera_optional": [False]}
    settings, _ = S.settings_from_values(only_top)
    assert settings.camera_topics == ("", "/cam/top")  # the wrist slot is masked
    with pytest.raises(S.ConfigError, match=r"unknown image feature 'base'.*observation.images.wrist"):
        S.settings_from_values({**values, "camera_features": ["base", "top"]})


# --------------------------------------------------------------------------------------------- openpi
def test_openpi_converted_folder_sends_what_openpi_sends(env: SimpleNamespace, caplog: pytest.LogCaptureFixture) -> None:
    """Items 1, 4, 5, 6: assets norm stats with openpi's formulas, the state prompt, PIL resize."""
    folder = openpi_converted(env.root / "openpi_pi05" / "converted", env.model,
                              openpi_norm_stats(env.state, env.action), "trossen")  # fmt: skip
    with caplog.at_level(logging.WARNING):
        rt = runtime(env, folder)
    assert "does not record discrete_state_input" in caplog.text and "pi05_libero" in caplog.text
    assert rt.normalizer is not None and rt.normalizer.formula == "openpi" and rt.resize_mode == "pil"
    images = [camera(120, 200, 3), None, camera(56, 56, 4)]
    frame = rt.make_frame(images, ROBOT_STATE, "fold the towel", stamp_ns=1)
    norm = openpi_quantile(ROBOT_STATE, env.state, inverse=False)
    assert frame.prompt_tokens.tolist() == env.sp.encode(state_prompt("fold the towel", norm), add_bos=True)
    size = REF_TINY.vision.image_size
    torch.testing.assert_close(frame.images[0], openpi_pixels(images[0], size), atol=1e-6, rtol=0)
    torch.testing.assert_close(frame.images[2], openpi_pixels(images[2], size), atol=1e-6, rtol=0)
    result = rt.step(frame)
    expected = openpi_quantile(result.tick.actions.astype(np.float64), env.action, inverse=True)[:, :ACTION_DIM]
    np.testing.assert_allclose(result.actions, expected, rtol=0, atol=2e-5)


def test_openpi_prompt_without_state_and_delta_actions(env: SimpleNamespace) -> None:
    """Items 3, 4: pi05_libero's prompt (no state, '\\n' encoded on its own) and ALOHA's delta mask."""
    folder = openpi_converted(env.root / "openpi_delta", env.model, openpi_norm_stats(env.state, env.action))
    mask = [True, True, True, False, True, True, False]
    rt = runtime(env, folder, prompt_format="pi05", delta_action_mask=mask)
    frame = rt.make_frame([camera()], ROBOT_STATE, " put the cup_in the sink", stamp_ns=1)
    assert frame.prompt_tokens.tolist() == env.sp.encode("put the cup in the sink", add_bos=True) + env.sp.encode("\n")
    result = rt.step(frame)
    unnorm = openpi_quantile(result.tick.actions.astype(np.float64), env.action, inverse=True)[:, :ACTION_DIM]
    expected = unnorm + np.where(np.array(mask), ROBOT_STATE[: len(mask)], 0)  # AbsoluteActions
    np.testing.assert_allclose(result.actions, expected, rtol=0, atol=2e-5)


def test_openpi_statistics_locations(env: SimpleNamespace, tmp_path: Path) -> None:
    """Item 1: <checkpoint>/assets, <checkpoint>/../assets, several → choose, none → refuse, norm_stats wins."""
    payload = openpi_norm_stats(env.state, env.action)
    parent = openpi_converted(tmp_path / "exp" / "pytorch", env.model, payload, "droid", in_parent=True)
    rt = runtime(env, parent)
    assert rt.normalizer is not None and rt.normalizer.source == str(tmp_path / "exp" / "assets" / "droid" / "norm_stats.json")

    bare = openpi_converted(tmp_path / "bare" / "ckpt", env.model, None)
    with pytest.raises(RuntimeLoadError) as info:
        runtime(env, bare)
    message = str(info.value)
    assert "\n" not in message and "no normalization statistics" in message
    assert f"{bare}/assets/<asset_id>/norm_stats.json" in message and f"{bare.parent}/assets" in message
    assert "norm_stats:" in message and "norm_mode: none" in message

    own = write_assets(tmp_path / "mine", "robot", payload)
    assert runtime(env, bare, norm_stats=str(own)).normalizer.source == str(own)  # type: ignore[union-attr]

    write_assets(bare / "assets", "a", payload)
    write_assets(bare / "assets", "b", payload)
    with pytest.raises(RuntimeLoadError, match=r"several normalization statistics .*a/norm_stats.json.*b/norm_stats.json"):
        runtime(env, bare)


def test_no_statistics_needs_norm_mode_none(env: SimpleNamespace, caplog: pytest.LogCaptureFixture) -> None:
    """Item 1: a LeRobot folder without processor files refuses, or sends normalized values when asked to."""
    folder = lerobot_folder(env.root / "lerobot_bare", env.model, env.state, env.action, processors=False)
    with pytest.raises(RuntimeLoadError, match=r"looked in .*policy_preprocessor.json.*norm_mode: none"):
        runtime(env, folder)
    with caplog.at_level(logging.WARNING):
        rt = runtime(env, folder, norm_mode="none")
    assert "norm_mode none" in caplog.text and rt.normalizer is None
    frame = rt.make_frame([camera()], ROBOT_STATE, "go", stamp_ns=1)
    assert frame.prompt_tokens.tolist() == env.sp.encode(state_prompt("go", ROBOT_STATE), add_bos=True)
    result = rt.step(frame)
    np.testing.assert_array_equal(result.actions, result.tick.actions)


def test_wider_statistics_use_their_leading_entries(env: SimpleNamespace, tmp_path: Path) -> None:
    """Item 1: 32-wide statistics with a 7-joint robot, as openpi slices them."""
    wide_state, wide_action = stats_arrays(32, -1.5, 2.5, seed=3), stats_arrays(32, 10.0, 12.0, seed=4)
    folder = openpi_converted(tmp_path / "wide", env.model, openpi_norm_stats(wide_state, wide_action))
    rt = runtime(env, folder)
    frame = rt.make_frame([camera()], ROBOT_STATE, "sort", stamp_ns=1)
    norm = openpi_quantile(ROBOT_STATE, wide_state, inverse=False)
    assert frame.prompt_tokens.tolist() == env.sp.encode(state_prompt("sort", norm), add_bos=True)
    result = rt.step(frame)
    model_dim = REF_TINY.action_dim
    q = {k: wide_action[k][:model_dim] for k in ("q01", "q99")}
    np.testing.assert_allclose(result.actions, openpi_quantile(result.tick.actions.astype(np.float64), q, True), atol=2e-5)


def test_openpi_training_checkpoint(env: SimpleNamespace, tmp_path: Path) -> None:
    """Item 7: train_pytorch.py output loads when the shape is given; otherwise one error naming what to set."""
    folder = openpi_training(tmp_path / "run" / "100", env.model, openpi_norm_stats(env.state, env.action))
    with pytest.raises(RuntimeLoadError) as info:
        runtime(env, folder)
    assert "openpi training checkpoint" in str(info.value)
    assert "['paligemma_variant', 'action_expert_variant', 'action_dim', 'horizon']" in str(info.value)
    rt = runtime(env, folder, paligemma_variant="gemma_2b", action_expert_variant="gemma_300m",
                 action_dim=REF_TINY.action_dim, horizon=H)  # fmt: skip
    assert rt.normalizer is not None and rt.normalizer.source.endswith("assets/trossen/norm_stats.json")
    result = rt.step(rt.make_frame([camera()], ROBOT_STATE, "pour", stamp_ns=1))
    assert result.actions.shape == (H, ACTION_DIM)


def test_hugging_face_tokenizer_folder_gives_the_same_prompt(env: SimpleNamespace, lerobot: Path, tmp_path: Path) -> None:
    """Item 8: the tokenizer as LeRobot users have it (tokenizer.json via transformers' converter)."""
    from transformers import AutoTokenizer, GemmaTokenizer

    hf = GemmaTokenizer.from_pretrained(env.tok.parent, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    folder = tmp_path / "paligemma-hf"
    hf.save_pretrained(folder)
    assert (folder / "tokenizer.json").is_file() and (folder / "tokenizer_config.json").is_file()
    reference = AutoTokenizer.from_pretrained(folder)
    rt = runtime(env, lerobot, tokenizer=str(folder))
    frame = rt.make_frame([camera()], ROBOT_STATE, "héllo wörld: put 12 cups_in the sink", stamp_ns=1)
    ids = frame.prompt_tokens.tolist()
    text = state_prompt("héllo wörld: put 12 cups_in the sink", lerobot_quantile(ROBOT_STATE, env.state, inverse=False))
    assert ids == env.sp.encode(text, add_bos=True)
    assert ids[1:] == reference(text, add_special_tokens=False)["input_ids"]
    assert rt.tokenizer.decode(ids) == env.sp.decode(ids) == reference.decode(ids, skip_special_tokens=True) == text


def test_tokenizer_saved_in_the_checkpoint_is_used(env: SimpleNamespace, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """LeRobot's TokenizerProcessorStep saves the tokenizer into ``<checkpoint>/tokenizer/``; no parameter needed."""
    from transformers import GemmaTokenizer

    folder = lerobot_folder(tmp_path / "with_tok", env.model, env.state, env.action)
    hf = GemmaTokenizer.from_pretrained(env.tok.parent, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    hf.save_pretrained(folder / "tokenizer")
    with caplog.at_level(logging.INFO):
        rt = runtime(env, folder, tokenizer="")
    assert "saved with the checkpoint" in caplog.text
    frame = rt.make_frame([camera()], ROBOT_STATE, "put the cup in the sink", stamp_ns=1)
    text = state_prompt("put the cup in the sink", lerobot_quantile(ROBOT_STATE, env.state, inverse=False))
    assert frame.prompt_tokens.tolist() == env.sp.encode(text, add_bos=True)
    with pytest.raises(RuntimeLoadError, match="has none in its tokenizer/ folder"):
        runtime(env, lerobot_folder(tmp_path / "without", env.model, env.state, env.action), tokenizer="")


def test_long_prompts_are_truncated_with_a_counter(env: SimpleNamespace, lerobot: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Item 10: cut to the token limit (openpi tokens[:max_len], LeRobot truncation=True), chunk still sent."""
    rt = runtime(env, lerobot)
    task = " ".join(["pick up the red cup and put it in the blue bowl"] * 12)
    with caplog.at_level(logging.WARNING):
        frame = rt.make_frame([camera()], ROBOT_STATE, task, stamp_ns=1)
        rt.make_frame([camera()], ROBOT_STATE, task, stamp_ns=2)
    full = env.sp.encode(state_prompt(task, lerobot_quantile(ROBOT_STATE, env.state, inverse=False)), add_bos=True)
    assert len(full) > REF_TINY.max_prompt_tokens
    assert frame.prompt_tokens.tolist() == full[: REF_TINY.max_prompt_tokens]
    assert rt.prompts_truncated == 2 and rt.last_prompt_truncated
    assert caplog.text.count("cut to max_prompt_tokens") == 1  # throttled
    assert rt.step(frame).actions.shape == (H, ACTION_DIM)


# --------------------------------------------------------------------------------------------- bf16
REFERENCE_FLOAT32 = {
    # openpi gemma_pytorch.to_bfloat16_for_selected_params
    "openpi": ("vision_tower.vision_model.embeddings.patch_embedding.weight",
               "vision_tower.vision_model.embeddings.patch_embedding.bias",
               "vision_tower.vision_model.embeddings.position_embedding.weight",
               "input_layernorm", "post_attention_layernorm", "model.norm"),
    # LeRobot modeling_pi05 PaliGemmaWithExpertModel.to_bfloat16_for_selected_params
    "lerobot": ("vision_tower", "multi_modal_projector", "input_layernorm", "post_attention_layernorm", "model.norm"),
}  # fmt: skip
OUTSIDE = ("action_in_proj", "action_out_proj", "time_mlp_in", "time_mlp_out")  # never cast: outside that module


@pytest.mark.parametrize("layout", ["openpi", "lerobot"])
def test_bfloat16_keeps_the_references_float32_weights(env: SimpleNamespace, tmp_path: Path, layout: str) -> None:
    """Item 9: the reference's selectors, applied to the stored (reference) key names, pick our float32 weights."""
    from safetensors import safe_open

    from oxygen_ros.model.checkpoints.checkpoint import load_checkpoint
    from oxygen_ros.model.checkpoints.key_maps import to_native

    if layout == "openpi":
        folder = openpi_converted(tmp_path / "o", env.model, openpi_norm_stats(env.state, env.action))
    else:
        folder = lerobot_folder(tmp_path / "l", env.model, env.state, env.action)
    loaded = load_checkpoint(folder, dtype=torch.bfloat16)
    params = dict(loaded.model.named_parameters())
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
    checked = 0
    for key in keys:
        match = to_native(key, layout)  # type: ignore[arg-type]
        if match.kind != "param":
            continue
        inner = key.removeprefix("model.")
        want = any(sel in inner for sel in REFERENCE_FLOAT32[layout]) or inner.startswith(OUTSIDE)
        assert params[match.native].dtype == (torch.float32 if want else torch.bfloat16), key  # type: ignore[index]
        checked += want
    assert checked > 10
    rt = runtime(env, folder, dtype="bfloat16")
    assert np.isfinite(rt.step(rt.make_frame([camera()], ROBOT_STATE, "go", stamp_ns=1)).actions).all()


# ------------------------------------------------------------------------------------ oxygen-replay
@pytest.mark.parametrize("layout", ["openpi", "lerobot"])
def test_oxygen_replay_offline_with_each_folder(env: SimpleNamespace, tmp_path: Path, layout: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """Each folder as published runs `oxygen-replay offline` with its statistics, chunk length,
    tokenizer, prompt format and camera order; without statistics it refuses with one line."""
    import yaml

    from oxygen_ros.replay.bagio import ACTION_CHUNK, BagReader
    from oxygen_ros.replay.cli import main

    params: dict[str, Any] = {
        "tokenizer": str(env.tok), "camera_topics": ["/camera/base/image_raw", "/camera/wrist/image_raw"],
        "joint_names": [f"j{i}" for i in range(1, 8)], "default_instruction": "put the cup in the sink",
        "task_names": ["language"], "task_prompts": [" Subtask:"], "task_every_n_frames": [1], "task_max_tokens": [3],
        "tokens_per_frame": 1, "control_rate_hz": 5.0, "num_threads": 1, "kv_budget_mb": 16.0,
    }  # fmt: skip
    if layout == "lerobot":
        model = random_model(REF_TINY.replace(num_image_slots=2, action_horizon=12), seed=9)
        folder = lerobot_folder(tmp_path / "pi05", model, env.state, env.action, n_action_steps=4,
                                cameras=("observation.images.wrist", "observation.images.top"))  # fmt: skip
        params |= {"camera_features": ["top", "wrist"]}
        want = {"layout": "lerobot", "chunk_length": 12, "n_action_steps": 4, "prompt_format": "pi05_state",
                "resize_mode": "bilinear", "camera_slots": ["observation.images.wrist", "observation.images.top"]}  # fmt: skip
    else:
        folder = openpi_converted(tmp_path / "pi05_libero" / "pytorch", env.model,
                                  openpi_norm_stats(env.state, env.action), "physical-intelligence/libero", in_parent=True)  # fmt: skip
        params |= {"prompt_format": "pi05"}
        want = {"layout": "openpi", "chunk_length": H, "n_action_steps": None, "prompt_format": "pi05",
                "resize_mode": "pil", "camera_slots": ["base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"]}  # fmt: skip
    params["checkpoint"] = str(folder)
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
    bag, out, summary_file = tmp_path / "scene.mcap", tmp_path / "out.mcap", tmp_path / "summary.json"
    assert main(["make-demo", str(bag), "--params-file", str(params_file), "--duration", "0.4", "--image-size", "64x48", "-q"]) == 0
    assert main(["offline", str(bag), "-o", str(out), "--params-file", str(params_file), "--summary", str(summary_file), "-q"]) == 0
    summary = json.loads(summary_file.read_text())
    assert {k: summary["model"][k] for k in want} == want
    assert summary["model"]["normalization"].startswith(f"quantile ({layout} formulas")
    assert summary["chunks"] == 3 and summary["prompts_truncated"] == 0
    with BagReader(out) as reader:
        chunks = [reader.deserialize(m) for m in reader.messages() if m.msgtype == ACTION_CHUNK]
    assert [(c.horizon, c.action_dim) for c in chunks] == [(want["chunk_length"], ACTION_DIM)] * 3
    data = np.concatenate([np.asarray(c.data) for c in chunks])
    assert 95 < data.mean() < 110  # robot units from the checkpoint's statistics
    capsys.readouterr()
    # The same folder without statistics: one line, exit code 2.
    for stats in folder.glob("policy_*"):
        stats.unlink()
    for assets in (folder / "assets", folder.parent / "assets"):
        if assets.exists():
            import shutil

            shutil.rmtree(assets)
    assert main(["offline", str(bag), "-o", str(tmp_path / "o2.mcap"), "--params-file", str(params_file), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no normalization statistics" in err[0] and "norm_mode: none" in err[0]


def test_presets_have_no_statistics_unless_given(env: SimpleNamespace, tmp_path: Path) -> None:
    cfg = RuntimeConfig(model_preset="tiny", tasks=[], engine_mode="action_only", kv_budget_mb=16.0, num_threads=1)
    assert PolicyRuntime.load(cfg).normalizer is None  # auto: a random-weight preset sends normalized values
    cfg.norm_mode = "quantile"
    with pytest.raises(RuntimeLoadError, match="model preset 'tiny' has none: set norm_stats"):
        PolicyRuntime.load(cfg)
    cfg.norm_stats = str(write_assets(tmp_path, "robot", openpi_norm_stats(env.state, env.action)))
    normalizer = PolicyRuntime.load(cfg).normalizer
    assert normalizer is not None and normalizer.formula == "openpi" and normalizer.mode == "quantile"


def test_broken_processor_files_are_named(env: SimpleNamespace, tmp_path: Path) -> None:
    folder = lerobot_folder(tmp_path / "pi05", env.model, env.state, env.action)
    (folder / "policy_postprocessor_step_0_unnormalizer_processor.safetensors").unlink()
    with pytest.raises(RuntimeLoadError, match=r"policy_postprocessor.json lists the unnormalizer_processor statistics "
                                               r"policy_postprocessor_step_0_unnormalizer_processor.safetensors, which is missing"):  # fmt: skip
        runtime(env, folder)
    folder = lerobot_folder(tmp_path / "mem", env.model, env.state, env.action)
    pre = json.loads((folder / "policy_preprocessor.json").read_text())
    pre["steps"][4]["config"]["include_state_in_prompt"] = False  # LeRobot MEM
    (folder / "policy_preprocessor.json").write_text(json.dumps(pre))
    with pytest.raises(RuntimeLoadError, match="include_state_in_prompt=false"):
        runtime(env, folder)


@pytest.mark.parametrize("layout", ["lerobot", "openpi"])
def test_first_chunk_end_to_end_from_reference_inputs(env: SimpleNamespace, tmp_path: Path, layout: str) -> None:
    """The whole chain without the runtime's intermediate values: reference pixels and prompt ids into the model's
    uncached reference path with the runtime's first noise draw (seed 0), then the reference post-processing."""
    if layout == "lerobot":
        folder = lerobot_folder(tmp_path / "l", env.model, env.state, env.action)
        pixels_of, norm = lerobot_pixels, lambda x, inverse: lerobot_quantile(x, env.state if not inverse else env.action, inverse)
    else:
        folder = openpi_converted(tmp_path / "o", env.model, openpi_norm_stats(env.state, env.action))
        pixels_of, norm = openpi_pixels, lambda x, inverse: openpi_quantile(x, env.state if not inverse else env.action, inverse)
    rt = runtime(env, folder, seed=0)
    images = [camera(120, 200, 5), None, camera(40, 30, 6)]
    result = rt.step(rt.make_frame(images, ROBOT_STATE, "stack the red block", stamp_ns=1))
    size = REF_TINY.vision.image_size
    pixels = torch.stack([pixels_of(im, size) if im is not None else torch.full((3, size, size), -1.0) for im in images])
    mask = torch.tensor([im is not None for im in images])
    tokens = torch.tensor(env.sp.encode(state_prompt("stack the red block", norm(ROBOT_STATE, False)), add_bos=True))
    noise = torch.randn(H, REF_TINY.action_dim, generator=torch.Generator().manual_seed(0))
    raw = env.model.sample_actions_uncached(pixels, mask, tokens, noise).numpy().astype(np.float64)
    # LeRobot cuts to the action feature's width before unnormalizing; openpi after (per dimension: the same).
    expected = norm(raw[:, :ACTION_DIM], True)
    np.testing.assert_allclose(result.actions, expected, rtol=0, atol=1e-4)
    assert np.abs(result.actions - norm(raw[:, :ACTION_DIM] + 1e-3, True)).max() > 1e-3  # the tolerance can tell


def test_lerobot_fine_tune_with_untied_lm_head(env: SimpleNamespace, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A LeRobot fine-tune stores the trained embedding and the untouched lm_head as two tensors. LeRobot embeds
    the prompt with the stored embedding; the text head is the stored lm_head. Only the embedding is perturbed."""
    folder = lerobot_folder(tmp_path / "ft", env.model, env.state, env.action)
    pg = "model.paligemma_with_expert.paligemma."
    tensors = load_file(str(folder / "model.safetensors"))
    head = tensors[pg + "lm_head.weight"]
    trained = head + 0.05 * torch.randn(head.shape, generator=torch.Generator().manual_seed(3))
    tensors[pg + "model.language_model.embed_tokens.weight"] = trained
    save_file(tensors, str(folder / "model.safetensors"))
    with caplog.at_level(logging.INFO):
        rt = runtime(env, folder, seed=0)
    assert "prompts embed with the stored embedding" in caplog.text and "untied text head" in rt.describe()
    torch.testing.assert_close(rt.model.embed_tokens.weight, trained, rtol=0, atol=0)
    hidden = torch.randn(4, REF_TINY.backbone.width, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(rt.model.lm_logits(hidden), hidden @ head.T)
    # The chunk with LeRobot's formulas, from a reference model carrying the fine-tuned embedding.
    reference = copy.deepcopy(env.model)
    reference.embed_tokens.weight.copy_(trained)
    images = [camera(60, 80, 7), camera(50, 50, 8), None]
    result = rt.step(rt.make_frame(images, ROBOT_STATE, "open the drawer", stamp_ns=1))
    size = REF_TINY.vision.image_size
    pixels = torch.stack([lerobot_pixels(im, size) if im is not None else torch.full((3, size, size), -1.0) for im in images])
    mask = torch.tensor([im is not None for im in images])
    norm = lerobot_quantile(ROBOT_STATE, env.state, inverse=False)
    tokens = torch.tensor(env.sp.encode(state_prompt("open the drawer", norm), add_bos=True))
    noise = torch.randn(H, REF_TINY.action_dim, generator=torch.Generator().manual_seed(0))
    raw = reference.sample_actions_uncached(pixels, mask, tokens, noise).numpy().astype(np.float64)
    expected = lerobot_quantile(raw[:, :ACTION_DIM], env.action, inverse=True)
    np.testing.assert_allclose(result.actions, expected, rtol=0, atol=1e-4)
    tied = env.model.sample_actions_uncached(pixels, mask, tokens, noise).numpy().astype(np.float64)
    assert np.abs(result.actions - lerobot_quantile(tied[:, :ACTION_DIM], env.action, inverse=True)).max() > 1e-3
