"""The pose a policy wants its arms in before an episode, and where it goes.

openpi's ALOHA policies carry it in their metadata (``policy_metadata={"reset_pose": [0, -1.5, 1.5, 0, 0, 0]}`` for
pi0_aloha and pi05_aloha in ``src/openpi/training/config.py``; the server sends it with its metadata), and openpi's
ALOHA client moves both arms there at each episode reset (``examples/aloha_real/main.py`` passes
``metadata.get("reset_pose")`` to ``AlohaRealEnvironment``, whose ``reset`` moves each puppet's six arm joints
there). Here it is the ``reset_pose`` parameter: one arm's joints in the robot's units, applied to every arm output
of as many joints. No ROS here.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .outputs import OutputSpec

OPENPI_ALOHA_RESET_POSE = (0.0, -1.5, 1.5, 0.0, 0.0, 0.0)  # pi0_aloha / pi05_aloha policy_metadata["reset_pose"]


def reset_pose(values: Mapping[str, Any]) -> tuple[float, ...] | None:
    """The configured reset pose (one arm's joint positions, the robot's units), or None when none is set."""
    pose = tuple(float(x) for x in values.get("reset_pose") or ())
    return pose or None


def reset_targets(pose: Sequence[float] | None, outputs: Sequence[OutputSpec]) -> list[tuple[OutputSpec, tuple[float, ...]]]:
    """Each arm output the pose applies to (a position joint trajectory or Interbotix joint group of as many joints)
    with its targets."""
    if not pose:
        return []
    return [(spec, tuple(pose)) for spec in outputs
            if spec.type in ("joint_trajectory", "joint_group") and spec.interface == "position"
            and len(spec.joints) == len(pose)]
