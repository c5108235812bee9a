"""The Interbotix X-series driver's commands (xs_sdk: an ALOHA puppet arm): ``JointGroupCommand`` on
``<robot>/commands/joint_group`` and ``JointSingleCommand`` on ``<robot>/commands/joint_single``.

The message package, ``interbotix_xs_msgs``, is built into the venv by scripts/build_interfaces.sh with the
driver's own field names and types (``string name``; ``float32[] cmd`` / ``float32 cmd``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = ["MESSAGE_TYPES", "interbotix_msg"]


@functools.cache  # looked up for every streamed command; an ImportError is not cached
def _types() -> dict[str, Any]:
    try:
        from interbotix_xs_msgs.msg import JointGroupCommand, JointSingleCommand
    except ImportError as exc:  # a venv made before the package was added
        raise ImportError("interbotix_xs_msgs is not installed in this Python: run scripts/setup.sh (it builds "
                          "interfaces/interbotix_xs_msgs into the venv)") from exc
    return {"joint_group": JointGroupCommand, "joint_single": JointSingleCommand}


def message_type(kind: str) -> Any:
    """The message class of a joint_group or joint_single output."""
    return _types()[kind]


MESSAGE_TYPES = ("joint_group", "joint_single")


def interbotix_msg(kind: str, name: str, values: np.ndarray) -> Any:
    """A joint_group (every value, in the group's joint order) or joint_single (one value) command named ``name``."""
    flat = [float(x) for x in np.asarray(values, dtype=np.float64).ravel()]
    if not all(np.isfinite(flat)):
        raise ValueError(f"{kind} command values contain NaN or infinite values: {flat}")
    cls = message_type(kind)
    if kind == "joint_single":
        if len(flat) != 1:
            raise ValueError(f"a joint_single command is one value, got {len(flat)}")
        return cls(name=name, cmd=flat[0])
    return cls(name=name, cmd=flat)
