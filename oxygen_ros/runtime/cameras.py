"""Camera topics given by the checkpoint's image feature names instead of slot order.

A LeRobot checkpoint names its cameras (``input_features``: ``observation.images.top`` ...) and fills the
prefix's image slots in that order; openpi names its slots ``base_0_rgb``, ``left_wrist_0_rgb``,
``right_wrist_0_rgb``. ``camera_features`` (parallel to ``camera_topics``) says which feature each topic feeds;
this module turns that into slot positions. No ROS here: the node and the bag tools share it.
"""

from __future__ import annotations

from oxygen_ros.model.checkpoints.checkpoint import image_slot_names
from oxygen_ros.model.checkpoints.checkpoint_info import preset_info
from oxygen_ros.model.network.config import preset
from oxygen_ros.model.checkpoints.key_maps import LEROBOT_IMAGE_PREFIX

from .config import RuntimeConfig


def slot_names_of(config: RuntimeConfig) -> tuple[str, ...]:
    """The image slot names of the configured model (config.json only; raises CheckpointError/ValueError)."""
    if not config.checkpoint:
        return preset_info(preset(config.model_preset)).image_features
    declared = {
        "paligemma_variant": config.paligemma_variant, "action_expert_variant": config.action_expert_variant,
        "action_dim": config.action_dim, "action_horizon": config.horizon,
    }  # fmt: skip
    return image_slot_names(config.checkpoint, declared)


def slot_positions(slot_names: tuple[str, ...], features: list[str]) -> list[int]:
    """The slot of each feature name (a LeRobot name may drop its ``observation.images.`` prefix).

    Raises ValueError naming the unknown or repeated features and the checkpoint's names.
    """
    positions, problems = [], []
    for name in features:
        matches = [i for i, slot in enumerate(slot_names) if name in (slot, slot.removeprefix(LEROBOT_IMAGE_PREFIX))]
        if not matches:
            problems.append(f"unknown image feature {name!r}")
        elif matches[0] in positions:
            problems.append(f"image feature {name!r} is given twice")
        else:
            positions.append(matches[0])
    if problems:
        raise ValueError(f"camera_features: {'; '.join(problems)} (the checkpoint's image features: {list(slot_names)})")
    return positions
