"""Model configuration: presets, files, and refusal of inconsistent shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oxygen_ros.model.network.config import BENCH, PI05, TINY, ModelConfig, preset


def test_presets_have_the_documented_shapes() -> None:
    assert (PI05.backbone.width, PI05.backbone.depth, PI05.backbone.mlp_dim) == (2048, 18, 16384)
    assert (PI05.expert.width, PI05.expert.mlp_dim, PI05.backbone.num_kv_heads, PI05.backbone.head_dim) == (1024, 4096, 1, 256)
    assert (PI05.vision.width, PI05.vision.depth, PI05.vision.num_heads, PI05.vision.mlp_dim) == (1152, 27, 16, 4304)
    assert PI05.tokens_per_image == 256 and PI05.vocab_size == 257_152 and PI05.action_dim == 32
    assert (BENCH.backbone.width, BENCH.backbone.head_dim, BENCH.expert.width, BENCH.vision.width) == (256, 32, 128, 192)
    assert BENCH.max_prompt_tokens == 100 and BENCH.tokens_per_image == 256
    assert preset("tiny") is TINY
    with pytest.raises(ValueError, match="unknown model preset"):
        preset("huge")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_config_file_starts_from_a_preset_and_overrides(tmp_path: Path, suffix: str) -> None:
    data = {"preset": "tiny", "action_horizon": 15, "backbone": {"depth": 3}, "expert": {"depth": 3}, "prefix_attention": "bidirectional"}
    path = tmp_path / f"model{suffix}"
    if suffix == ".yaml":
        import yaml

        path.write_text(yaml.safe_dump(data))
    else:
        path.write_text(json.dumps(data))
    cfg = ModelConfig.from_file(path)
    assert cfg.action_horizon == 15 and cfg.backbone.depth == 3 and cfg.expert.depth == 3
    assert cfg.backbone.width == TINY.backbone.width and cfg.prefix_attention == "bidirectional"
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_inconsistent_configs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown model config keys"):
        ModelConfig.from_dict({"preset": "tiny", "widht": 3})
    with pytest.raises(ValueError, match="depth"):
        ModelConfig.from_dict({"preset": "tiny", "backbone": {"depth": 4}})
    with pytest.raises(ValueError, match="share heads"):
        ModelConfig.from_dict({"preset": "tiny", "expert": {"head_dim": 8}})
    with pytest.raises(ValueError, match="prefix_attention"):
        TINY.replace(prefix_attention="sideways")
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="mapping"):
        ModelConfig.from_file(bad)
