"""Checkpoint loading/saving: openpi, LeRobot and oxygen layouts, exact reproduction, clear errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Callable

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from oxygen_ros.model.checkpoints.checkpoint import (
    CheckpointError,
    detect_layout,
    load_checkpoint,
    read_config,
    save_checkpoint,
)
from oxygen_ros.model.network.precision import cast_for_inference
from oxygen_ros.model.network.config import PI05, TINY, ModelConfig
from oxygen_ros.model.checkpoints.key_maps import (
    config_from_lerobot,
    config_from_openpi,
    lerobot_config_json,
    openpi_config_json,
    to_native,
)
from oxygen_ros.model.checkpoints.normalize import load_norm_stats
from oxygen_ros.model.network.vla import Pi05Model

from layouts import random_model

LAYOUTS = ("openpi", "lerobot", "oxygen")
REAL_LAYOUTS = ("openpi", "lerobot")
PG = "paligemma_with_expert.paligemma."
EX = "paligemma_with_expert.gemma_expert."

# A non-default shape: other depths, heads, head_dim, action size, image size, slots, vocabulary.
CUSTOM = ModelConfig.from_dict(
    {
        "preset": "tiny",
        "vision": {"image_size": 28, "num_heads": 4},
        "backbone": {"width": 48, "depth": 3, "mlp_dim": 96, "num_heads": 2, "head_dim": 8},
        "expert": {"width": 24, "depth": 3, "mlp_dim": 40, "num_heads": 2, "head_dim": 8},
        "action_dim": 5,
        "action_horizon": 7,
        "num_image_slots": 2,
        "vocab_size": 300,
        "num_denoise_steps": 4,
        "max_prompt_tokens": 20,
        "prefix_attention": "bidirectional",
    }
)


def run(model: Pi05Model) -> tuple[torch.Tensor, ...]:
    """Prefill hidden + prefix KV + sampled actions on fixed inputs and noise."""
    cfg = model.config
    gen = torch.Generator().manual_seed(1)
    size = cfg.vision.image_size
    images = (torch.rand(cfg.num_image_slots, 3, size, size, generator=gen) * 2 - 1).to(model.dtype)
    mask = torch.ones(cfg.num_image_slots, dtype=torch.bool)
    mask[-1] = False  # one missing camera
    tokens = torch.randint(3, cfg.vocab_size, (6,), generator=gen)
    noise = torch.randn(cfg.action_horizon, cfg.action_dim, generator=gen)
    b = cfg.backbone
    shape = (b.depth, cfg.max_prefix_tokens, b.num_kv_heads, b.head_dim)
    k = torch.zeros(shape, dtype=model.dtype, device=model.device)
    v = torch.zeros_like(k)
    out = model.prefill(images, mask, tokens, k, v)
    k, v = k[:, : out.length], v[:, : out.length]
    actions = model.sample_actions(k, v, noise)
    return out.last_hidden, k, v, actions


def to_bfloat16(model: Pi05Model) -> Pi05Model:
    """A bfloat16 copy (RoPE frequencies are computed in float32 whatever the weights' dtype)."""
    return copy.deepcopy(model).to(torch.bfloat16)


def assert_same(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and torch.equal(x, y)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny() -> Pi05Model:
    return random_model(TINY)


def saved(tmp_path: Path, model: Pi05Model, layout: str = "openpi", name: str = "ckpt") -> Path:
    return save_checkpoint(model, tmp_path / name, layout)  # type: ignore[arg-type]


def rewrite(directory: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> None:
    tensors = load_file(str(directory / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(directory / "model.safetensors"))


def error_of(directory: Path, **kwargs: object) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(directory, **kwargs)  # type: ignore[arg-type]
    return str(info.value)


# ----------------------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("config", [TINY, CUSTOM], ids=["tiny", "custom"])
def test_round_trip_reproduces_outputs_exactly(tmp_path: Path, layout: str, config: ModelConfig) -> None:
    model = random_model(config, seed=3)
    directory = saved(tmp_path, model, layout)
    assert detect_layout(directory) == layout
    loaded = load_checkpoint(directory)
    assert loaded.layout == layout and loaded.source == directory
    assert loaded.config == config
    assert not loaded.model.training
    assert all(not t.is_meta for t in [*loaded.model.parameters(), *loaded.model.buffers()])
    assert_same(run(model), run(loaded.model))


@pytest.mark.parametrize("layout", REAL_LAYOUTS)
def test_bfloat16_loading_matches_a_bfloat16_model(tmp_path: Path, tiny: Pi05Model, layout: str) -> None:
    directory = saved(tmp_path, tiny, layout)
    loaded = load_checkpoint(directory, dtype=torch.bfloat16)
    assert loaded.model.dtype == torch.bfloat16 and loaded.islands == layout  # the framework's float32 islands
    assert_same(run(cast_for_inference(copy.deepcopy(tiny), torch.bfloat16, layout)), run(loaded.model))  # type: ignore[arg-type]
    plain = load_checkpoint(directory, dtype=torch.bfloat16, float32_islands="none")
    assert_same(run(to_bfloat16(tiny)), run(plain.model))


def test_bfloat16_checkpoint_declares_precision_and_loads_in_float32(tmp_path: Path, tiny: Pi05Model) -> None:
    half = to_bfloat16(tiny)
    directory = saved(tmp_path, half, "openpi")
    assert json.loads((directory / "config.json").read_text())["precision"] == "bfloat16"
    loaded = load_checkpoint(directory, dtype="float32")
    assert loaded.precision == "bfloat16" and loaded.model.dtype == torch.float32
    assert_same(run(half.float()), run(loaded.model))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_loads_onto_cuda(tmp_path: Path, tiny: Pi05Model) -> None:
    loaded = load_checkpoint(saved(tmp_path, tiny, "lerobot"), dtype=torch.bfloat16, device="cuda")
    tensors = [*loaded.model.parameters(), *loaded.model.buffers()]
    assert all(t.device.type == "cuda" for t in tensors)
    for got, want in zip(run(loaded.model), run(to_bfloat16(tiny)), strict=True):
        assert torch.allclose(got.cpu().float(), want.float(), atol=0.1, rtol=0.05)


def test_real_layout_key_names(tmp_path: Path, tiny: Pi05Model) -> None:
    with safe_open(str(saved(tmp_path, tiny, "openpi") / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    for key in (
        PG + "model.vision_tower.vision_model.embeddings.patch_embedding.weight",
        PG + "model.vision_tower.vision_model.embeddings.position_embedding.weight",
        PG + "model.vision_tower.vision_model.encoder.layers.1.self_attn.out_proj.bias",
        PG + "model.vision_tower.vision_model.post_layernorm.weight",
        PG + "model.multi_modal_projector.linear.weight",
        PG + "model.language_model.layers.1.self_attn.k_proj.weight",
        PG + "model.language_model.layers.0.mlp.gate_proj.weight",
        PG + "model.language_model.norm.weight",
        PG + "lm_head.weight",  # the tied embedding, stored once under the name save_model keeps
        EX + "model.layers.1.input_layernorm.dense.weight",
        EX + "model.layers.0.post_attention_layernorm.dense.bias",
        EX + "model.norm.dense.weight",
        EX + "lm_head.weight",
        "action_in_proj.weight",
        "action_out_proj.bias",
        "time_mlp_in.weight",
        "time_mlp_out.bias",
    ):
        assert key in keys, key
    assert PG + "model.language_model.embed_tokens.weight" not in keys
    with safe_open(str(saved(tmp_path, tiny, "lerobot", "lr") / "model.safetensors"), "pt") as f:
        assert all(k.startswith("model.paligemma_with_expert.") or k.startswith("model.") for k in f.keys())
        assert "model.time_mlp_in.weight" in set(f.keys())


def test_key_map_matches_transformers_module_names() -> None:
    """openpi/LeRobot build their model from HF PaliGemma + Gemma modules: our map must name those exactly."""
    transformers = pytest.importorskip("transformers")
    b, e, vis = TINY.backbone, TINY.expert, TINY.vision
    text = dict(
        model_type="gemma", hidden_size=b.width, intermediate_size=b.mlp_dim, num_hidden_layers=b.depth,
        num_attention_heads=b.num_heads, num_key_value_heads=b.num_kv_heads, head_dim=b.head_dim,
        vocab_size=TINY.vocab_size,
    )  # fmt: skip
    vision = dict(
        model_type="siglip_vision_model", hidden_size=vis.width, intermediate_size=vis.mlp_dim,
        num_hidden_layers=vis.depth, num_attention_heads=vis.num_heads, patch_size=vis.patch_size,
        image_size=vis.image_size, vision_use_head=False,
    )  # fmt: skip
    paligemma = transformers.PaliGemmaForConditionalGeneration(
        transformers.PaliGemmaConfig(
            vision_config=vision, text_config=text, projection_dim=b.width, image_token_index=TINY.vocab_size - 1
        )
    )
    expert = transformers.GemmaForCausalLM(
        transformers.GemmaConfig(
            hidden_size=e.width, intermediate_size=e.mlp_dim, num_hidden_layers=e.depth, num_attention_heads=e.num_heads,
            num_key_value_heads=e.num_kv_heads, head_dim=e.head_dim, vocab_size=TINY.vocab_size,
        )  # fmt: skip
    )
    expert.model.embed_tokens = None  # as openpi and LeRobot do
    hf = {PG + k: tuple(v.shape) for k, v in paligemma.state_dict().items()}
    hf |= {EX + k: tuple(v.shape) for k, v in expert.state_dict().items()}
    ours = {k: tuple(v.shape) for k, v in Pi05Model(TINY).state_dict().items()}
    covered = set()
    for key, shape in hf.items():
        if key.startswith(EX) and "norm.weight" in key:
            continue  # stock Gemma RMSNorm; pi0.5's expert has adaptive norms (.dense) instead
        match = to_native(key, "openpi")
        if key == PG + "lm_head.weight":
            assert match.kind == "tied_lm_head"
        elif key == EX + "lm_head.weight":
            assert match.kind == "ignored"
        else:
            assert match.kind == "param" and ours.get(match.native) == shape, key
            covered.add(match.native)
    pi05_only = {k for k in ours if ".dense." in k or k.split(".")[0] in ("action_in_proj", "action_out_proj")}
    pi05_only |= {k for k in ours if k.startswith("time_mlp_")}
    assert set(ours) - covered == pi05_only


def test_config_json_is_in_each_layouts_own_format(tmp_path: Path, tiny: Pi05Model) -> None:
    openpi = json.loads((saved(tmp_path, tiny, "openpi", "a") / "config.json").read_text())
    assert openpi == {
        "action_dim": 8,
        "action_horizon": 10,
        "paligemma_variant": "gemma_2b",
        "action_expert_variant": "gemma_300m",
        "precision": "float32",
    }
    lerobot = json.loads((saved(tmp_path, tiny, "lerobot", "b") / "config.json").read_text())
    assert lerobot["type"] == "pi05" and lerobot["chunk_size"] == 10 and lerobot["max_action_dim"] == 8
    assert lerobot["n_action_steps"] <= lerobot["chunk_size"]
    oxygen = json.loads((saved(tmp_path, tiny, "oxygen", "c") / "config.json").read_text())
    assert ModelConfig.from_dict(oxygen) == TINY
    assert not (tmp_path / "c" / "oxygen_config.json").exists()


def real_checkpoint_dir(tmp_path: Path, config_json: dict) -> Path:
    directory = tmp_path / "real"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config_json))
    return directory


def test_real_openpi_config_gives_the_pi05_shapes(tmp_path: Path) -> None:
    # What examples/convert_jax_model_to_pytorch.py writes for pi05_libero.
    directory = real_checkpoint_dir(
        tmp_path,
        {
            "action_dim": 32,
            "action_horizon": 10,
            "paligemma_variant": "gemma_2b",
            "action_expert_variant": "gemma_300m",
            "precision": "bfloat16",
        },
    )
    config, layout, precision = read_config(directory)
    assert (layout, precision) == ("openpi", "bfloat16")
    assert config == PI05.replace(prefix_attention="bidirectional")
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in Pi05Model(config).state_dict().items()}
    assert shapes["embed_tokens.weight"] == (257_152, 2048)
    assert shapes["vision_tower.patch_embedding.weight"] == (1152, 3, 14, 14)
    assert shapes["vision_tower.position_embedding.weight"] == (256, 1152)
    assert shapes["multi_modal_projector.weight"] == (2048, 1152)
    assert shapes["layers.17.vlm.self_attn.k_proj.weight"] == (256, 2048)
    assert shapes["layers.17.vlm.mlp.gate_proj.weight"] == (16_384, 2048)
    assert shapes["layers.17.action.input_layernorm.dense.weight"] == (3072, 1024)
    assert shapes["layers.0.action.self_attn.q_proj.weight"] == (2048, 1024)
    assert shapes["action_norm.dense.weight"] == (3072, 1024)
    assert shapes["action_in_proj.weight"] == (1024, 32)


def test_real_lerobot_config_maps_onto_model_config(tmp_path: Path) -> None:
    cams = ["base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"]
    directory = real_checkpoint_dir(
        tmp_path,
        {
            "type": "pi05",
            "n_obs_steps": 1,
            "input_features": {
                **{f"observation.images.{c}": {"type": "VISUAL", "shape": [3, 224, 224]} for c in cams},
                "observation.state": {"type": "STATE", "shape": [32]},
            },
            "output_features": {"action": {"type": "ACTION", "shape": [7]}},
            "paligemma_variant": "gemma_2b",
            "action_expert_variant": "gemma_300m",
            "dtype": "bfloat16",
            "chunk_size": 50,
            "n_action_steps": 50,
            "max_state_dim": 32,
            "max_action_dim": 32,
            "num_inference_steps": 10,
            "image_resolution": [224, 224],
            "empty_cameras": 0,
            "tokenizer_max_length": 200,
        },
    )
    config, layout, precision = read_config(directory)
    assert (layout, precision) == ("lerobot", "bfloat16")
    assert config == PI05.replace(prefix_attention="bidirectional", action_horizon=50)
    overridden, _, _ = read_config(directory, {"action_horizon": 10, "prefix_attention": "causal_text"})
    assert overridden == PI05


def test_pi05_sized_configs_round_trip_without_a_sidecar() -> None:
    for config in (PI05.replace(prefix_attention="bidirectional", action_horizon=50), PI05.replace(
        prefix_attention="bidirectional", action_horizon=15, num_denoise_steps=5, max_prompt_tokens=100
    )):
        assert ModelConfig.from_dict(config_from_lerobot(lerobot_config_json(config, "bfloat16"))) == config
    config = PI05.replace(prefix_attention="bidirectional")
    assert ModelConfig.from_dict(config_from_openpi(openpi_config_json(config, "bfloat16"))) == config


# ------------------------------------------------------------------------------------- accepted variants
def test_embedding_stored_as_embed_tokens_or_both(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny)
    embed = PG + "model.language_model.embed_tokens.weight"
    rewrite(directory, lambda t: t.__setitem__(embed, t.pop(PG + "lm_head.weight")))
    assert_same(run(tiny), run(load_checkpoint(directory).model))
    rewrite(directory, lambda t: t.__setitem__(PG + "lm_head.weight", t[embed].clone()))
    assert_same(run(tiny), run(load_checkpoint(directory).model))


def test_lerobot_keys_without_prefix_and_legacy_names_load(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny, "lerobot")

    def legacy(t: dict[str, torch.Tensor]) -> None:
        for key in list(t):
            new = key.removeprefix("model.")
            new = new.replace(PG + "model.language_model.", PG + "language_model.model.")
            new = new.replace(PG + "model.vision_tower.", PG + "vision_tower.")
            new = new.replace("time_mlp_in.", "action_time_mlp_in.")
            t[new] = t.pop(key)

    rewrite(directory, legacy)
    loaded = load_checkpoint(directory)
    assert loaded.ignored_keys == (EX + "lm_head.weight",)
    assert_same(run(tiny), run(loaded.model))


def test_sharded_checkpoint(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny)
    tensors = load_file(str(directory / "model.safetensors"))
    (directory / "model.safetensors").unlink()
    keys = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for name, names in shards.items():
        save_file({k: tensors[k] for k in names}, str(directory / name))
    index = {"metadata": {}, "weight_map": {k: name for name, names in shards.items() for k in names}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    assert_same(run(tiny), run(load_checkpoint(directory).model))

    (directory / "model-00002-of-00002.safetensors").unlink()
    assert "shard 'model-00002-of-00002.safetensors' is missing" in error_of(directory)


def test_config_overrides(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny)
    loaded = load_checkpoint(directory, config_overrides={"num_denoise_steps": 3, "prefix_attention": "bidirectional"})
    assert loaded.config == TINY.replace(num_denoise_steps=3, prefix_attention="bidirectional")
    assert "unknown model config keys" in error_of(directory, config_overrides={"no_such_field": 1})
    message = error_of(directory, config_overrides={"action_dim": 9})
    assert "action_in_proj.weight is (32, 8), the model needs (32, 9)" in message


def test_norm_stats_are_written_and_found(tmp_path: Path, tiny: Pi05Model) -> None:
    stats = {
        "state": {"mean": [0.0, 1.0], "std": [1.0, 2.0], "q01": [-1.0, -2.0], "q99": [1.0, 2.0]},
        "actions": {"mean": torch.zeros(3), "std": torch.ones(3), "q01": [-1.0] * 3, "q99": [1.0] * 3},
    }
    directory = save_checkpoint(tiny, tmp_path / "c", "openpi", norm_stats=stats, asset_id="trossen")
    loaded = load_checkpoint(directory)
    assert loaded.norm_stats_path == directory / "assets" / "trossen" / "norm_stats.json"
    assert load_norm_stats(loaded.norm_stats_path)["actions"].dim == 3
    save_checkpoint(tiny, directory, "openpi", norm_stats={"norm_stats": stats}, asset_id="droid")
    loaded = load_checkpoint(directory)
    assert loaded.norm_stats_path is None and sorted(loaded.norm_stats_paths) == ["droid", "trossen"]
    assert load_checkpoint(directory, asset_id="droid").norm_stats_path == directory / "assets/droid/norm_stats.json"
    assert "no assets/libero/norm_stats.json; found: ['droid', 'trossen']" in error_of(directory, asset_id="libero")


# ----------------------------------------------------------------------------------------- clear errors
def test_truncated_file(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny)
    path = directory / "model.safetensors"
    data = path.read_bytes()
    for cut in (len(data) - 100, 200, 6):
        path.write_bytes(data[:cut])
        message = error_of(directory)
        assert str(path) in message and "truncated or corrupt" in message


def test_garbage_file(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny, "lerobot")
    (directory / "model.safetensors").write_bytes(torch.randint(0, 256, (4096,), dtype=torch.uint8).numpy().tobytes())
    assert "not a readable safetensors file (truncated or corrupt?)" in error_of(directory)


def test_missing_key(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny)
    key = EX + "model.layers.1.post_attention_layernorm.dense.bias"
    rewrite(directory, lambda t: t.pop(key))
    message = error_of(directory)
    assert str(directory / "model.safetensors") in message
    assert f"1 missing key: {key}" in message


def test_missing_embedding_names_both_spellings(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny, "lerobot")
    rewrite(directory, lambda t: t.pop("model." + PG + "lm_head.weight"))
    message = error_of(directory)
    assert f"model.{PG}lm_head.weight (or model.{PG}model.language_model.embed_tokens.weight)" in message


def test_extra_key(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny)
    rewrite(directory, lambda t: t.__setitem__(PG + "model.language_model.layers.9.mlp.up_proj.weight", torch.ones(2)))
    assert f"1 unexpected key: {PG}model.language_model.layers.9.mlp.up_proj.weight" in error_of(directory)


def test_wrong_shape(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny, "oxygen")
    rewrite(directory, lambda t: t.__setitem__("time_mlp_out.weight", torch.zeros(32, 31)))
    assert "time_mlp_out.weight is (32, 31), the model needs (32, 32)" in error_of(directory)


def test_non_float_tensor(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny)
    rewrite(directory, lambda t: t.__setitem__("time_mlp_out.bias", torch.zeros(32, dtype=torch.int64)))
    assert "time_mlp_out.bias has dtype I64, not a floating point type" in error_of(directory)


def test_all_problems_in_one_error(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny)

    def damage(t: dict[str, torch.Tensor]) -> None:
        for key in [k for k in t if ".vision_model." in k]:
            del t[key]
        t["extra.weight"] = torch.zeros(1)
        t["action_out_proj.bias"] = torch.zeros(3)

    rewrite(directory, damage)
    message = error_of(directory)
    n_vision = sum(1 for k in tiny.state_dict() if k.startswith("vision_tower."))
    assert f"{n_vision} missing keys" in message and f"and {n_vision - 8} more" in message
    assert "1 unexpected key: extra.weight" in message
    assert "action_out_proj.bias is (3,), the model needs (8,)" in message


@pytest.mark.parametrize("layout", LAYOUTS)
def test_lm_head_that_differs_from_the_embedding_is_kept_apart(tmp_path: Path, tiny: Pi05Model, layout: str) -> None:
    """Loaded as stored: the embedding for the prompt, the lm_head for text; saving keeps both."""
    directory = saved(tmp_path, tiny)
    embed = PG + "model.language_model.embed_tokens.weight"
    rewrite(directory, lambda t: t.__setitem__(embed, t[PG + "lm_head.weight"] + 1))
    loaded = load_checkpoint(directory)
    assert loaded.untied_text_head and loaded.model.lm_head is not None
    torch.testing.assert_close(loaded.model.embed_tokens.weight, tiny.embed_tokens.weight + 1, rtol=0, atol=0)
    hidden = torch.randn(3, TINY.backbone.width)
    torch.testing.assert_close(loaded.model.lm_logits(hidden), hidden @ tiny.embed_tokens.weight.T)
    again = load_checkpoint(saved(tmp_path, loaded.model, layout, "again"))
    assert again.untied_text_head
    assert_same(run(loaded.model), run(again.model))
    torch.testing.assert_close(again.model.lm_logits(hidden), loaded.model.lm_logits(hidden), rtol=0, atol=0)
    assert not load_checkpoint(saved(tmp_path, tiny, layout, "tied")).untied_text_head


def test_pi0_checkpoint_is_named(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny)
    rewrite(directory, lambda t: t.__setitem__("state_proj.weight", torch.zeros(32, 8)))
    assert "looks like a pi0 checkpoint" in error_of(directory)


def test_weights_of_another_layout_get_a_hint(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny, "openpi")
    (directory / "config.json").write_text(json.dumps(TINY.to_dict()))  # oxygen's config, openpi's weights
    message = error_of(directory)
    assert "(oxygen layout;" in message and "hint: most stored keys are not oxygen names" in message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "config.json: invalid JSON"),
        ("[1, 2]", "config.json: expected a JSON object, got list"),
        ('{"hello": 1}', "cannot tell the checkpoint layout"),
        ('{"paligemma_variant": 7}', "paligemma_variant must be a string, got 7"),
        ('{"action_horizon": "ten"}', "action_horizon must be a positive integer, got 'ten'"),
        ('{"type": "pi0"}', "LeRobot policy type 'pi0' is not supported"),
        ('{"type": "pi05", "use_visual_memory": true}', "use_visual_memory=true (LeRobot MEM) is not supported"),
    ],
)
def test_invalid_config_json(tmp_path: Path, tiny: Pi05Model, content: str, expected: str) -> None:
    directory = saved(tmp_path, tiny)
    (directory / "config.json").write_text(content)
    message = error_of(directory)
    assert expected in message and "config.json" in message


def test_invalid_sidecar_value(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny)
    (directory / "oxygen_config.json").write_text('{"prefix_attention": "sideways"}')
    message = error_of(directory)
    assert "invalid model config (from config.json + oxygen_config.json)" in message and "sideways" in message


def test_missing_pieces(tmp_path: Path, tiny: Pi05Model) -> None:
    assert "does not exist" in error_of(tmp_path / "nowhere")
    directory = saved(tmp_path, tiny)
    assert "is not a directory" in error_of(directory / "model.safetensors")
    (directory / "model.safetensors").unlink()
    assert "no model.safetensors (nor model.safetensors.index.json)" in error_of(directory)
    (directory / "config.json").unlink()
    assert f"{directory / 'config.json'} is missing" in error_of(directory)
    with pytest.raises(CheckpointError, match="is missing"):
        detect_layout(directory)


def test_bad_arguments(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny)
    assert "dtype must be a floating point type, not torch.int32" in error_of(directory, dtype=torch.int32)
    assert "unknown dtype 'float33'" in error_of(directory, dtype="float33")
    with pytest.raises(ValueError, match="unknown checkpoint layout"):
        save_checkpoint(tiny, tmp_path / "x", "jax")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="asset_id"):
        save_checkpoint(tiny, tmp_path / "y", norm_stats={}, asset_id="../up")


@pytest.mark.parametrize("with_sidecar", [False, True], ids=["tensors", "sidecar"])
def test_unknown_variant_takes_its_sizes_from_the_tensors_or_the_sidecar(tmp_path: Path, with_sidecar: bool) -> None:
    """A fine-tune naming its own Gemma variant: the sizes come from the stored shapes (or the sidecar)."""
    model = random_model(CUSTOM)
    directory = saved(tmp_path, model, "openpi")
    config = json.loads((directory / "config.json").read_text())
    config.update(paligemma_variant="gemma_custom_lora", action_expert_variant="gemma_tiny_expert")
    (directory / "config.json").write_text(json.dumps(config))
    sidecar = json.loads((directory / "oxygen_config.json").read_text())
    stacks = {k: sidecar.pop(k) for k in ("backbone", "expert")}
    if with_sidecar:  # the sidecar may state them as well; it is read after the tensors
        sidecar.update(stacks)
    (directory / "oxygen_config.json").write_text(json.dumps(sidecar))
    loaded = load_checkpoint(directory)
    assert loaded.config == CUSTOM
    assert_same(run(model), run(loaded.model))


def test_unknown_variant_without_layers_is_refused_with_the_sidecar_named(tmp_path: Path, tiny: Pi05Model) -> None:
    directory = saved(tmp_path, tiny)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "action_expert_variant": "gemma_mine"}))
    rewrite(directory, lambda t: [t.pop(k) for k in list(t) if k.startswith(EX + "model.layers.")])
    message = error_of(directory)
    assert "names a variant the package does not know" in message and "oxygen_config.json" in message
    assert "no expert layers" in message
