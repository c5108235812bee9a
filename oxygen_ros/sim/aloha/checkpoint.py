"""A small ALOHA-shaped π0.5 checkpoint with random weights, in openpi's converted layout.

Shaped as openpi's ``pi05_aloha`` configs are (three camera slots: cam_high and the two wrists; actions
padded to 32 dims of which 14 are ALOHA's; a chunk of 50; ``assets/trossen/norm_stats.json``) at the tiny
size, so the node loads it exactly as it loads a converted fine-tune. Its statistics are round numbers that
cover the ALOHA transfer-cube expert: states in π's space (joints flipped, grippers angular), actions as
openpi trains them (arm joints relative to the state, grippers absolute). Random weights: the actions show
the pipeline and its timing, not skill.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from oxygen_ros.model.checkpoints.checkpoint import save_checkpoint
from oxygen_ros.model.network.config import TINY, ModelConfig
from oxygen_ros.model.tokenizers.tokenizer import train_tokenizer
from oxygen_ros.model.network.vla import Pi05Model

ALOHA_SMALL = TINY.replace(action_dim=32, action_horizon=50, prefix_attention="bidirectional")
ASSET_ID = "trossen"  # openpi's asset id of its ALOHA checkpoints


def _stats(q01: list[float], q99: list[float]) -> dict[str, list[float]]:
    lo, hi = np.asarray(q01), np.asarray(q99)
    return {"mean": ((lo + hi) / 2).tolist(), "std": ((hi - lo) / 4).tolist(), "q01": lo.tolist(), "q99": hi.tolist()}


def norm_stats() -> dict:
    """openpi's norm_stats.json payload for 14 state and 14 action dims (left arm first)."""
    arm_state, gripper_state = ([-3.0] * 6, [3.0] * 6), ([-0.5], [1.5])
    arm_delta, gripper_action = ([-0.5] * 6, [0.5] * 6), ([-1.3], [1.0])
    state = _stats((arm_state[0] + gripper_state[0]) * 2, (arm_state[1] + gripper_state[1]) * 2)
    actions = _stats((arm_delta[0] + gripper_action[0]) * 2, (arm_delta[1] + gripper_action[1]) * 2)
    return {"norm_stats": {"state": state, "actions": actions}}


def write_small_checkpoint(folder: Path, seed: int = 0, config: ModelConfig = ALOHA_SMALL,
                           action_scale: float = 1.0) -> tuple[Path, Path]:  # fmt: skip
    """Write the checkpoint to ``folder/pi05_aloha_small`` and a tokenizer beside it; returns both paths.
    ``action_scale``: the action output projection multiplied by it (e.g. 30: a deliberately wild model whose
    outputs lie far outside the statistics' range, as a bad fine-tune's can)."""
    torch.manual_seed(seed)
    model = Pi05Model(config)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed)
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
        for p in model.action_out_proj.parameters():
            p.mul_(action_scale)
    checkpoint = save_checkpoint(model.eval(), Path(folder) / "pi05_aloha_small", "openpi", norm_stats(), ASSET_ID)
    tokenizer = Path(folder) / "tokenizer.model"
    train_tokenizer(tokenizer, config.vocab_size)
    return checkpoint, tokenizer
