"""A `rosbags` type store that knows the oxygen_ros_msgs types and the Interbotix arm driver's two command
messages (interbotix_xs_msgs, the ALOHA's joint_group / joint_single outputs), for reading and writing bags
without rclpy.

The .msg definitions are read from the installed interface package (`share/oxygen_ros_msgs/msg`
under an AMENT_PREFIX_PATH entry or this Python's prefix, i.e. what rclpy's classes were generated
from) or, failing that, from the repository's own msg/ folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rosbags.typesys import Stores, get_typestore, get_types_from_msg
from rosbags.typesys.store import Typestore

PACKAGE = "oxygen_ros_msgs"
MSG_NAMES = ("ActionChunk", "TextDelta")
# Newest first: ROS 2 Kilted, else the nearest older store this rosbags version has.
_STORE_PREFERENCE = ("ROS2_KILTED", "ROS2_JAZZY", "ROS2_IRON", "ROS2_HUMBLE")


def candidate_msg_dirs() -> list[Path]:
    """Folders searched for the .msg files, in order of preference."""
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    prefixes.append(sys.prefix)
    dirs = [Path(p) / "share" / PACKAGE / "msg" for p in prefixes]
    dirs.append(Path(__file__).resolve().parents[2] / "msg")  # the repository checkout
    return dirs


def find_msg_dir() -> Path:
    """The first candidate folder that holds every oxygen_ros_msgs .msg file."""
    tried = candidate_msg_dirs()
    for folder in tried:
        if all((folder / f"{name}.msg").is_file() for name in MSG_NAMES):
            return folder
    raise FileNotFoundError(
        f"{PACKAGE} .msg files ({', '.join(MSG_NAMES)}) not found in any of: "
        + ", ".join(str(d) for d in tried)
    )


def default_store() -> Stores:
    """ROS 2 Kilted's store, or the nearest older one available in this rosbags version."""
    for name in _STORE_PREFERENCE:
        if hasattr(Stores, name):
            return Stores[name]
    return Stores.LATEST


def _types_from(folder: Path, package: str, names: tuple[str, ...]) -> dict:
    """rosbags type definitions of ``package``'s messages ``names`` from their .msg files in ``folder``."""
    types: dict = {}
    for name in names:
        path = folder / f"{name}.msg"
        if not path.is_file():
            raise FileNotFoundError(f"message definition {path} does not exist")
        types.update(get_types_from_msg(path.read_text(), f"{package}/msg/{name}"))
    return types


def oxygen_types(msg_dir: str | Path | None = None) -> dict:
    """rosbags type definitions of the oxygen_ros_msgs messages, keyed 'oxygen_ros_msgs/msg/<Name>'."""
    return _types_from(Path(msg_dir) if msg_dir is not None else find_msg_dir(), PACKAGE, MSG_NAMES)


INTERBOTIX_PACKAGE = "interbotix_xs_msgs"
INTERBOTIX_MSG_NAMES = ("JointGroupCommand", "JointSingleCommand")


def interbotix_types() -> dict:
    """rosbags type definitions of interbotix_xs_msgs' JointGroupCommand and JointSingleCommand, from the
    repository's interface package (the same .msg files the venv's package is built from)."""
    folder = Path(__file__).resolve().parents[2] / "interfaces" / INTERBOTIX_PACKAGE / "msg"
    return _types_from(folder, INTERBOTIX_PACKAGE, INTERBOTIX_MSG_NAMES)


def oxygen_typestore(msg_dir: str | Path | None = None, store: Stores | None = None) -> Typestore:
    """A fresh rosbags Typestore: the standard ROS 2 types (Kilted's, see `default_store`) plus
    oxygen_ros_msgs/msg/ActionChunk, oxygen_ros_msgs/msg/TextDelta and interbotix_xs_msgs' two commands."""
    typestore = get_typestore(store if store is not None else default_store())
    typestore.register(oxygen_types(msg_dir))
    typestore.register(interbotix_types())
    return typestore
