"""A synthetic, deterministic demo scene written as a real ROS 2 bag.

A coloured cube slides over a table while a 7-joint arm moves smoothly; each configured camera slot sees
the scene from its own viewpoint (a wide base view, zoomed "wrist" views). Everything is drawn with numpy
from the seed and the time alone, so the same parameters always give byte-identical bags. The bag holds
what the node subscribes to: ``sensor_msgs/Image`` per camera, ``sensor_msgs/JointState`` and the
instruction as ``std_msgs/String`` (recorded with transient-local QoS, like a latched topic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .bagio import IMAGE, JOINT_STATE, NS_PER_S, STRING, BagWriter, image_msg, joint_state_msg, qos_profile, string_msg

# Defaults follow config/demo.yaml (slot 1 unused there); `make-demo --params-file` adapts to any config.
DEFAULT_CAMERA_TOPICS = ("/camera/base/image_raw", "", "/camera/wrist/image_raw")
DEFAULT_JOINT_NAMES = tuple(f"panda_joint{i}" for i in range(1, 8))
DEFAULT_INSTRUCTION_TOPIC = "/oxygen_node/instruction"
DEFAULT_INSTRUCTION = "pick up the red cup"
# A fixed, plausible epoch (2024-01-01T00:00:00Z) so recorded stamps look like real ones and stay stable.
DEFAULT_START_NS = 1_704_067_200 * NS_PER_S


@dataclass
class SceneConfig:
    """What the demo bag contains. Times are seconds; rates are Hz."""

    duration_s: float = 5.0
    camera_rate_hz: float = 10.0
    joint_rate_hz: float = 50.0
    image_width: int = 128
    image_height: int = 96
    seed: int = 0
    camera_topics: list[str] = field(default_factory=lambda: list(DEFAULT_CAMERA_TOPICS))
    joint_state_topic: str = "/joint_states"
    joint_names: list[str] = field(default_factory=lambda: list(DEFAULT_JOINT_NAMES))
    # Several joint-state topics (ALOHA: one per arm): (topic, positions in joint_names, the names the topic
    # publishes them by). Empty: every joint on joint_state_topic under joint_names.
    joint_topics: list[tuple[str, list[int], list[str]]] = field(default_factory=list)
    instruction_topic: str = DEFAULT_INSTRUCTION_TOPIC
    instruction: str = DEFAULT_INSTRUCTION
    start_ns: int = DEFAULT_START_NS
    encoding: str = "rgb8"

    def validate(self) -> "SceneConfig":
        """Raise ValueError naming the first bad setting."""
        checks = [
            (self.duration_s > 0, f"duration must be > 0 s, got {self.duration_s}"),
            (self.camera_rate_hz > 0, f"camera rate must be > 0 Hz, got {self.camera_rate_hz}"),
            (self.joint_rate_hz > 0, f"joint rate must be > 0 Hz, got {self.joint_rate_hz}"),
            (8 <= self.image_width <= 4096 and 8 <= self.image_height <= 4096,
             f"image size must be within 8..4096 px, got {self.image_width}x{self.image_height}"),
            (any(t for t in self.camera_topics), "at least one camera topic is needed"),
            (all(not t or t.startswith("/") for t in self.camera_topics), f"camera topics must be absolute: {self.camera_topics}"),
            (self.encoding in ("rgb8", "bgr8"), f"encoding must be rgb8 or bgr8, got {self.encoding!r}"),
            (self.start_ns >= 0, "start time must be >= 0"),
        ]  # fmt: skip
        for ok, reason in checks:
            if not ok:
                raise ValueError(reason)
        return self


# ------------------------------------------------------------------------------------------ the scene
_VIEWS = (  # (zoom, centre x, centre y, tint) per camera slot: base view, then two "wrist" close-ups
    (1.0, 0.50, 0.50, (1.00, 1.00, 1.00)),
    (1.8, 0.40, 0.62, (1.00, 0.96, 0.92)),
    (1.8, 0.60, 0.62, (0.92, 0.96, 1.00)),
)
_TABLE_Y = 0.45  # world y (0 = top, 1 = bottom) where the table edge is


class DemoScene:
    """Deterministic cube-on-a-table motion and arm joint trajectories for one seed."""

    def __init__(self, config: SceneConfig) -> None:
        self.config = config.validate()
        rng = np.random.default_rng(config.seed)
        self.cube_colour = np.array([200, 40, 40]) if config.seed == 0 else rng.integers(40, 230, size=3)
        self.phase = rng.uniform(0, 2 * math.pi, size=2)
        n = len(config.joint_names)
        self.joint_offset = rng.uniform(-0.5, 0.5, size=n)
        self.joint_amplitude = rng.uniform(0.2, 0.6, size=n)
        self.joint_freq = rng.uniform(0.1, 0.4, size=n)
        self.joint_phase = rng.uniform(0, 2 * math.pi, size=n)
        self.table_texture = rng.integers(-6, 7, size=(64, 64)).astype(np.int16)

    def cube_position(self, t: float) -> tuple[float, float]:
        """Cube centre in world coordinates (x right, y down, both 0..1) at time t."""
        x = 0.5 + 0.28 * math.sin(2 * math.pi * t / 4.0 + self.phase[0])
        y = 0.68 + 0.10 * math.sin(2 * math.pi * t / 3.0 + self.phase[1])
        return x, y

    def joints(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(positions, velocities) of the arm joints at time t: smooth sinusoids."""
        w = 2 * math.pi * self.joint_freq
        angle = w * t + self.joint_phase
        return self.joint_offset + self.joint_amplitude * np.sin(angle), self.joint_amplitude * w * np.cos(angle)

    def image(self, slot: int, t: float, frame_index: int) -> np.ndarray:
        """HxWx3 uint8 RGB view of camera ``slot`` at time t (frame_index seeds the sensor noise)."""
        cfg = self.config
        zoom, cx, cy, tint = _VIEWS[slot % len(_VIEWS)]
        h, w = cfg.image_height, cfg.image_width
        v, u = np.mgrid[0:h, 0:w].astype(np.float32)
        # Pixel → world: the view is centred on (cx, cy) and spans 1/zoom of the world.
        wx = cx + (u / w - 0.5) / zoom
        wy = cy + (v / h - 0.5) / zoom
        img = np.empty((h, w, 3), dtype=np.float32)
        wall = (0.75 + 0.2 * (1 - np.clip(wy / _TABLE_Y, 0, 1)))[..., None] * np.array([170, 185, 205], np.float32)
        tex = self.table_texture[(np.clip(wy, 0, 0.999) * 64).astype(int), (np.clip(wx, 0, 0.999) * 64).astype(int)]
        table = np.array([150, 105, 65], np.float32) + tex[..., None]
        on_table = (wy >= _TABLE_Y)[..., None]
        img[:] = np.where(on_table, table, wall)
        # The cube: a shadow, a front face and a lighter top face, its size growing towards the camera.
        x, y = self.cube_position(t)
        half = 0.05 + 0.03 * (y - 0.58)
        shadow = (np.abs(wx - x - 0.015) < half * 1.1) & (np.abs(wy - y - 0.01) < half * 0.9)
        img[shadow & on_table[..., 0]] *= 0.6
        front = (np.abs(wx - x) < half) & (np.abs(wy - y) < half)
        top = (np.abs(wx - x - 0.25 * half) < half) & (wy >= y - 1.6 * half) & (wy < y - half)
        img[front] = self.cube_colour
        img[top] = np.minimum(self.cube_colour * 1.35 + 20, 255)
        # A grey gripper reaching down towards the cube, swinging with the first joint.
        q, _ = self.joints(t)
        gx = x + 0.08 * math.sin(q[0] if len(q) else 0.0)
        gripper = (np.abs(wx - gx) < 0.02) & (wy < y - 1.8 * half)
        img[gripper] = (90, 90, 95)
        img *= np.array(tint, np.float32)
        noise = np.random.default_rng([self.config.seed, slot, frame_index]).integers(-3, 4, size=img.shape)
        return np.clip(img + noise, 0, 255).astype(np.uint8)


# ------------------------------------------------------------------------------------------ the bag
def scene_for_config(config: Any, **overrides: Any) -> SceneConfig:
    """A SceneConfig on the topics, joints and instruction of a `ReplayConfig` (the node's parameters);
    keyword arguments set other fields (None values are ignored)."""
    cfg = SceneConfig()
    cfg.camera_topics = list(config.camera_topics)
    cfg.joint_state_topic = config.joint_state_topic
    cfg.instruction_topic = config.instruction_topic
    if config.settings.joint_names:
        cfg.joint_names = list(config.settings.joint_names)
        sources = config.settings.joint_sources
        if len(sources) > 1:
            cfg.joint_topics = [(config.topic(j.topic), list(j.indices), list(j.names)) for j in sources]
    if config.settings.default_instruction.strip():
        cfg.instruction = config.settings.default_instruction
    for key, value in overrides.items():
        if not hasattr(cfg, key):
            raise TypeError(f"SceneConfig has no field {key!r}")
        if value is not None:
            setattr(cfg, key, value)
    return cfg


def _times(start_ns: int, rate_hz: float, duration_s: float) -> list[int]:
    """Sample times start, start + 1/rate, ... up to and including start + duration (integer ns)."""
    count = int(math.floor(duration_s * rate_hz + 1e-9)) + 1
    return [start_ns + round(k * NS_PER_S / rate_hz) for k in range(count)]


def write_demo_bag(
    path: str | Path, config: SceneConfig, *, storage: str | None = None, overwrite: bool = False, progress: Any = None
) -> dict[str, Any]:
    """Write the demo scene as a ROS 2 bag; returns a summary (topics, counts, time range).

    ``progress`` (optional) is called as ``progress(fraction, text)``.
    """
    scene = DemoScene(config)
    events: list[tuple[int, int, str, int]] = []  # (time, order, kind, index): a deterministic merge order
    events.append((config.start_ns, 0, "instruction", 0))
    for k, t in enumerate(_times(config.start_ns, config.joint_rate_hz, config.duration_s)):
        events.append((t, 1, "joints", k))
    for k, t in enumerate(_times(config.start_ns, config.camera_rate_hz, config.duration_s)):
        for slot, topic in enumerate(config.camera_topics):
            if topic:
                events.append((t, 2 + slot, "image", k))
    events.sort()
    counts: dict[str, int] = {}
    with BagWriter(path, storage=storage, overwrite=overwrite) as writer:
        ts = writer.typestore
        for n, (stamp, order, kind, k) in enumerate(events):
            t = (stamp - config.start_ns) / NS_PER_S
            if kind == "instruction":
                writer.write(config.instruction_topic, STRING, stamp, string_msg(ts, config.instruction),
                             qos=[qos_profile(reliable=True, transient_local=True, depth=1)])  # fmt: skip
                topic = config.instruction_topic
            elif kind == "joints":
                pos, vel = scene.joints(t)
                for topic, indices, names in config.joint_topics or [(config.joint_state_topic, [], config.joint_names)]:
                    part = indices or slice(None)
                    writer.write(topic, JOINT_STATE, stamp, joint_state_msg(ts, names, pos[part], vel[part], stamp),
                                 qos=[qos_profile()])  # fmt: skip
                    counts[topic] = counts.get(topic, 0) + 1
                topic = ""  # counted above, per topic
            else:
                slot = order - 2
                topic = config.camera_topics[slot]
                frame_id = topic.strip("/").split("/")[1] if topic.count("/") >= 2 else f"camera{slot}"
                msg = image_msg(ts, scene.image(slot, t, k), stamp, frame_id, encoding=config.encoding)
                writer.write(topic, IMAGE, stamp, msg, qos=[qos_profile(reliable=False)])
            if topic:
                counts[topic] = counts.get(topic, 0) + 1
            if progress is not None:
                progress((n + 1) / len(events), f"{n + 1}/{len(events)} messages")
    return {
        "path": str(path),
        "storage": writer.storage,
        "start_ns": config.start_ns,
        "end_ns": events[-1][0],
        "duration_s": (events[-1][0] - config.start_ns) / NS_PER_S,
        "topics": counts,
        "instruction": config.instruction,
        "seed": config.seed,
    }
