"""ALOHA actions as a π0.5 checkpoint trained by openpi outputs them: the training-side transforms.

openpi's ``AlohaInputs`` turns a dataset action into the model's space before normalization: with
``adapt_to_pi`` the joint flip mask and ``_gripper_from_angular_inv`` (the inverse of what ``AlohaOutputs``
applies), then the delta mask subtracts the state (itself through ``_decode_state``), then ``Normalize``.
``model_outputs`` does exactly that, so a known dataset-space action (the scripted expert's) can be handed to
the node as the model's output and followed through every conversion after it; the same function makes
training targets from expert episodes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from oxygen_ros.embodiment import aloha
from oxygen_ros.model.checkpoints.normalize import Normalizer


def model_outputs(actions: np.ndarray, state: np.ndarray, normalizer: Normalizer,
                  delta_action_mask: Sequence[bool] | None, action_dim: int) -> np.ndarray:  # fmt: skip
    """Dataset-space actions [H, 14] taken from dataset-space ``state`` [14] → the model's normalized output
    [H, action_dim] (float32, zero padded), as an openpi ALOHA checkpoint with adapt_to_pi gives them."""
    pi_actions = aloha.actions_in(np.asarray(actions, dtype=np.float64))
    if delta_action_mask is not None:
        mask = np.asarray(delta_action_mask[: aloha.DIM], dtype=bool)
        pi_state = aloha.state_in(np.asarray(state, dtype=np.float64))
        pi_actions[..., : len(mask)] -= np.where(mask, pi_state[: len(mask)], 0.0)
    normalized = normalizer.normalize_actions(pi_actions)
    out = np.zeros((*normalized.shape[:-1], action_dim), dtype=np.float32)
    out[..., : normalized.shape[-1]] = normalized
    return out
