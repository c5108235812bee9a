"""A bag as a robot's recording holds it: cameras, joint states and the commands sent to its controllers.

`RobotBagWriter` wraps `BagWriter` with one method per message a robot's recording carries, each written at
its recorded time with the QoS a robot's publisher offers (cameras best effort, the rest reliable, the
instruction latched). Cameras go out as ``sensor_msgs/Image`` (rgb8) or, with ``compressed``, as
``sensor_msgs/CompressedImage`` (``png``: lossless; ``jpeg``: what image_transport's compressed plugin sends
by default). No rclpy: the simulators write their expert's episodes with it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .bagio import (
    COMPRESSED_IMAGE, FLOAT64_ARRAY, IMAGE, JOINT_STATE, JOINT_TRAJECTORY, STRING, BagWriter, duration_msg, header_msg,
    image_msg, joint_state_msg, qos_profile, string_msg,
)  # fmt: skip

IMAGE_FORMATS = ("raw", "png", "jpeg")
JPEG_QUALITY = 90


def encode_image(rgb: np.ndarray, fmt: str) -> bytes:
    """An HxWx3 uint8 RGB image as PNG or JPEG bytes (Pillow)."""
    from PIL import Image as PILImage

    buffer = io.BytesIO()
    image = PILImage.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8))
    if fmt == "jpeg":
        image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    else:
        image.save(buffer, format="PNG")
    return buffer.getvalue()


class RobotBagWriter:
    """One robot recording; use as a context manager (an exception removes the partial bag)."""

    def __init__(self, path: str | Path, *, image_format: str = "raw", storage: str | None = None,
                 overwrite: bool = False) -> None:  # fmt: skip
        if image_format not in IMAGE_FORMATS:
            raise ValueError(f"image format must be one of {list(IMAGE_FORMATS)}, got {image_format!r}")
        self.image_format = image_format
        self.bag = BagWriter(path, storage=storage, overwrite=overwrite)
        self.ts = self.bag.typestore
        self.start_ns: int | None = None
        self.end_ns = 0

    def __enter__(self) -> "RobotBagWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        self.bag.__exit__(exc_type, *rest)

    @property
    def counts(self) -> dict[str, int]:
        return self.bag.counts

    def _write(self, topic: str, msgtype: str, at_ns: int, msg: Any, **qos: Any) -> None:
        self.start_ns = at_ns if self.start_ns is None else min(self.start_ns, at_ns)
        self.end_ns = max(self.end_ns, at_ns)
        self.bag.write(topic, msgtype, at_ns, msg, qos=[qos_profile(**qos)])

    def image(self, topic: str, rgb: np.ndarray, at_ns: int, frame_id: str = "") -> None:
        if self.image_format == "raw":
            self._write(topic, IMAGE, at_ns, image_msg(self.ts, rgb, at_ns, frame_id), reliable=False)
            return
        msg = self.ts.types[COMPRESSED_IMAGE](header=header_msg(self.ts, at_ns, frame_id), format=self.image_format,
                                              data=np.frombuffer(encode_image(rgb, self.image_format), dtype=np.uint8))  # fmt: skip
        self._write(topic, COMPRESSED_IMAGE, at_ns, msg, reliable=False)

    def joint_state(self, topic: str, names: Sequence[str], positions: np.ndarray, at_ns: int) -> None:
        pos = np.asarray(positions, dtype=np.float64)
        self._write(topic, JOINT_STATE, at_ns, joint_state_msg(self.ts, names, pos, np.zeros_like(pos), at_ns))

    def trajectory(self, topic: str, joints: Sequence[str], positions: np.ndarray, times_s: Sequence[float], at_ns: int,
                   stamp_ns: int = 0) -> None:  # fmt: skip
        """A JointTrajectory of ``positions`` [points, joints], point k at ``times_s[k]`` after ``stamp_ns``
        (0: on receipt), received at ``at_ns``."""
        point_cls = self.ts.types["trajectory_msgs/msg/JointTrajectoryPoint"]
        empty = np.zeros(0, dtype=np.float64)
        points = [point_cls(positions=np.asarray(row, dtype=np.float64), velocities=empty, accelerations=empty,
                            effort=empty, time_from_start=duration_msg(self.ts, round(t * 1e9)))
                  for row, t in zip(np.atleast_2d(positions), times_s)]  # fmt: skip
        msg = self.ts.types[JOINT_TRAJECTORY](header=header_msg(self.ts, stamp_ns), joint_names=list(joints), points=points)
        self._write(topic, JOINT_TRAJECTORY, at_ns, msg)

    def float64_array(self, topic: str, values: Sequence[float], at_ns: int) -> None:
        layout = self.ts.types["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0)
        msg = self.ts.types[FLOAT64_ARRAY](layout=layout, data=np.asarray(values, dtype=np.float64))
        self._write(topic, FLOAT64_ARRAY, at_ns, msg)

    def string(self, topic: str, text: str, at_ns: int, latched: bool = False) -> None:
        self._write(topic, STRING, at_ns, string_msg(self.ts, text), transient_local=latched, depth=100 if latched else 10)

    def event(self, topic: str, at_ns: int, **fields: Any) -> None:
        """A JSON line on a String topic (episode starts and ends, as the simulator node sends them)."""
        self.string(topic, json.dumps(fields), at_ns, latched=True)

    def summary(self) -> dict[str, Any]:
        start = self.start_ns or 0
        return {"path": str(self.bag.path), "storage": self.bag.storage, "duration_s": (self.end_ns - start) / 1e9,
                "images": self.image_format, "topics": dict(self.bag.counts)}  # fmt: skip
