"""Outputs: each takes some action dimensions to one controller interface (no ROS types here).

* ``joint_trajectory`` — ros2_control's joint_trajectory_controller: one JointTrajectory per chunk, the
  values as ``positions`` or, for a velocity command interface, ``velocities`` (JTC timing rules as in
  ``alignment``).
* ``float64_array`` — forward_command_controller (``std_msgs/Float64MultiArray``, one value per joint, applied
  at once): the action due now, streamed at the step period. With the ``position_step`` interface the values are
  steps: each command is the output joints' measured positions (the latest joint state) plus the step, a position
  target one step ahead for a position or impedance controller to chase (DROID's RobotEnv in joint_velocity mode).
* ``joint_group`` — the Interbotix X-series driver (xs_sdk, e.g. an ALOHA puppet arm): ``JointGroupCommand``
  (``name`` = the joint group, ``group``; ``cmd`` one position per joint of the group, rad), streamed as
  ``float64_array``; the driver moves its servos there at once.
* ``joint_single`` — xs_sdk's ``JointSingleCommand`` (``name`` = the joint, ``group``, e.g. ``gripper``; ``cmd``
  one value): one dim, streamed.
* ``twist`` — MoveIt Servo (``geometry_msgs/TwistStamped``): 6 dims (linear xyz, angular xyz) times ``scale``
  in ``frame``, streamed and stamped when sent; Servo drops commands older than ~0.1 s, so a twist is
  re-sent at least every ``TWIST_REPEAT_S`` while its chunk lasts and a zero twist stops the arm when it ends.

An output's values, in order: its dims of the actions, binarized (a gripper may: values above ``threshold``
become ``above``, the others ``below``), converted into the controller's units (``conversions``, one per dim:
``oxygen_ros/embodiment/conversions.py``), scaled down together where one exceeds its bound (``together``:
the direction kept, as DROID scales a joint velocity whose largest joint is beyond 1), a twist times ``scale``. Outputs are given as flat lists (one entry
per output) because ROS parameters cannot hold lists of mappings.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from oxygen_ros.embodiment import ConversionError, Conversions, parse_conversions

from .trajectory import JointLimits

OUTPUT_TYPES = ("joint_trajectory", "float64_array", "joint_group", "joint_single", "twist")
INTERFACES = ("position", "velocity", "position_step")
STREAMED = ("float64_array", "joint_group", "joint_single", "twist")
NAMED = ("joint_group", "joint_single")  # the driver's message names its group or joint (``group``)
TWIST_DIMS = 6
SERVO_TIMEOUT_S = 0.1  # MoveIt Servo's incoming_command_timeout default: older commands are dropped
TWIST_REPEAT_S = SERVO_TIMEOUT_S / 2


class OutputConfigError(ValueError):
    """The outputs do not add up; one line per problem."""


@dataclass(frozen=True)
class Binarize:
    threshold: float
    below: float
    above: float

    def apply(self, values: np.ndarray) -> np.ndarray:
        return np.where(values > self.threshold, self.above, self.below)


@dataclass(frozen=True)
class OutputSpec:
    name: str
    type: str
    topic: str
    dims: tuple[int, ...]  # indices into the published action vector, in the order they are sent
    joints: tuple[str, ...] = ()  # joint_trajectory: names (one per dim); float64_array: for the log only
    interface: str = "position"  # joint_trajectory: the controller's command interface
    frame: str = ""  # twist: header.frame_id
    scale: float = 1.0  # twist: every component times this
    binarize: Binarize | None = None
    conversions: Conversions | None = None  # model → controller units, one per dim; None: as they are
    group: str = ""  # joint_group: the driver's joint group (e.g. arm); joint_single: the joint (e.g. gripper)
    together: tuple[float, ...] | None = None  # per-dim bounds (robot units) the values are scaled down to as one

    def _scaled_together(self, out: np.ndarray) -> np.ndarray:
        """The whole row divided by its largest ratio to the bounds when that is above 1 (direction kept)."""
        bounds = np.asarray(self.together, dtype=np.float64)
        ratio = np.max(np.abs(out) / bounds, axis=-1, keepdims=True)
        return out / np.maximum(ratio, 1.0)

    @property
    def streamed(self) -> bool:
        return self.type in STREAMED

    @property
    def steps(self) -> bool:
        """Its values are steps added to the joints' measured positions (the ``position_step`` interface)."""
        return self.interface == "position_step"

    def values(self, actions: np.ndarray) -> np.ndarray:
        """[..., len(dims)] of this output from [..., action_dim] actions (binarized, converted, twist scaled)."""
        out = np.asarray(actions, dtype=np.float64)[..., list(self.dims)]
        if self.binarize is not None:
            out = self.binarize.apply(out)
        if self.conversions is not None:
            out = self.conversions.to_robot(out)
        if self.together is not None:
            out = self._scaled_together(out)
        if self.type == "twist":
            out = out * self.scale
        return out


def parse_dims(text: str) -> tuple[int, ...]:
    """"0..5" / "6" / "0,2,4" / "0..5,7" → indices; ValueError says what is wrong."""
    dims: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("..")
        try:
            start, end = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"dims {text!r}: {part!r} is not an index or a range a..b") from None
        if start < 0 or end < start:
            raise ValueError(f"dims {text!r}: {part!r} is not a range of indices >= 0")
        dims.extend(range(start, end + 1))
    if not dims:
        raise ValueError(f"dims {text!r} names no action dimension")
    return tuple(dims)


def _binarize(text: str) -> Binarize | None:
    if not str(text).strip():
        return None
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise ValueError(f"binarize {text!r} must be 'threshold,below,above' (three numbers)")
    return Binarize(*values)


def parse_bounds(text: str, n_dims: int) -> tuple[float, ...] | None:
    """"4x 2.175; 3x 2.61" / "1, 2, 3" → one bound > 0 per dim; '' → None. ValueError says what is wrong."""
    if not str(text).strip():
        return None
    bounds: list[float] = []
    for part in (p.strip() for p in str(text).replace(";", ",").split(",")):
        count, sep, value = part.partition("x ")
        try:
            bounds += [float(value)] * int(count) if sep else [float(part)]
        except ValueError:
            raise ValueError(f"scale_together {text!r}: {part!r} is not a number or 'Nx number'") from None
    if len(bounds) != n_dims or not all(math.isfinite(b) and b > 0 for b in bounds):
        raise ValueError(f"scale_together {text!r}: needs {n_dims} bounds > 0 (one per dim), got {bounds}")
    return tuple(bounds)


def _conversions(texts: Sequence[str], i: int, name: str, n_dims: int) -> Conversions | None:
    """Output ``i``'s conversions (None when output_conversions is not given); a count other than its dims is refused."""
    if not texts:
        return None
    key = f"output_conversions[{i}] ({name})"
    converted = parse_conversions(str(texts[i]), key)
    if len(converted) != n_dims:
        raise ConversionError(f"{key}: {len(converted)} conversions for {n_dims} dims")
    return converted


def _entry(values: Sequence, i: int, default: object) -> object:
    return values[i] if i < len(values) else default


def build_outputs(
    names: Sequence[str], types: Sequence[str], topics: Sequence[str], dims: Sequence[str],
    joints: Sequence[str] = (), interfaces: Sequence[str] = (), frames: Sequence[str] = (),
    scales: Sequence[float] = (), binarize: Sequence[str] = (), conversions: Sequence[str] = (),
    groups: Sequence[str] = (), together: Sequence[str] = (),
) -> list[OutputSpec]:  # fmt: skip
    """Outputs from parallel lists (``names``, ``types``, ``topics``, ``dims`` one entry per output; the optional
    lists empty or one entry per output). Raises OutputConfigError with one line per problem."""
    n = len(types)
    problems: list[str] = []
    for label, values, required in (("output_names", names, True), ("output_topics", topics, True),
                                    ("output_dims", dims, True), ("output_joints", joints, False),
                                    ("output_interfaces", interfaces, False), ("output_frames", frames, False),
                                    ("output_scales", scales, False), ("output_binarize", binarize, False),
                                    ("output_conversions", conversions, False), ("output_groups", groups, False),
                                    ("output_scale_together", together, False)):  # fmt: skip
        if len(values) != n and (required or values):
            problems.append(f"{label} has {len(values)} entries for {n} output_types (one per output{'' if required else ', or none'})")
    if problems:
        raise OutputConfigError("\n".join(problems))
    specs = []
    for i in range(n):
        name = str(names[i])
        try:
            kind = str(types[i])
            if kind not in OUTPUT_TYPES:
                raise ValueError(f"type {kind!r} is not one of {list(OUTPUT_TYPES)}")
            interface = str(_entry(interfaces, i, "")) or "position"
            if interface not in INTERFACES:
                raise ValueError(f"interface {interface!r} is not one of {list(INTERFACES)}")
            joint_text = str(_entry(joints, i, ""))
            output_dims = parse_dims(str(dims[i]))
            converted = _conversions(conversions, i, name, len(output_dims))
            specs.append(OutputSpec(
                name, kind, str(topics[i]), output_dims,
                tuple(j.strip() for j in joint_text.split(",") if j.strip()), interface,
                str(_entry(frames, i, "")), float(_entry(scales, i, 1.0)), _binarize(str(_entry(binarize, i, ""))),
                converted, str(_entry(groups, i, "")).strip(), parse_bounds(str(_entry(together, i, "")), len(output_dims)),
            ))  # fmt: skip
        except ConversionError as exc:
            problems.append(str(exc))
        except ValueError as exc:
            problems.append(f"output {name}: {exc}")
    if problems:
        raise OutputConfigError("\n".join(problems))
    return specs


def output_problems(specs: Sequence[OutputSpec], action_dim: int) -> list[str]:
    """Why these outputs do not fit actions of ``action_dim`` dims: one line each (empty: they fit)."""
    problems = []
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        problems.append(f"output names repeat: {names}")
    topics = [s.topic for s in specs]
    if len(set(topics)) != len(topics):
        problems.append(f"two outputs publish on one topic: {topics}")
    owner: dict[int, str] = {}
    for s in specs:
        if not s.topic:
            problems.append(f"output {s.name}: no topic")
        beyond = [d for d in s.dims if d >= action_dim]
        if beyond:
            problems.append(f"output {s.name}: dims {beyond} do not exist (the actions have {action_dim} dims)")
        for d in s.dims:
            if d in owner:
                problems.append(f"outputs {owner[d]} and {s.name} both take action dim {d}")
            owner.setdefault(d, s.name)
        if s.type == "joint_trajectory" and len(s.joints) != len(s.dims):
            problems.append(f"output {s.name}: {len(s.joints)} joints for {len(s.dims)} dims (joint_trajectory needs one name per dim)")
        if s.type == "float64_array" and s.joints and len(s.joints) != len(s.dims):
            problems.append(f"output {s.name}: {len(s.joints)} joints for {len(s.dims)} dims")
        if s.type in NAMED:
            if not s.group:
                problems.append(f"output {s.name}: a {s.type} names the driver's {'group' if s.type == 'joint_group' else 'joint'} "
                                f"(output_groups), e.g. {'arm' if s.type == 'joint_group' else 'gripper'}")
            if len(s.joints) != len(s.dims):
                problems.append(f"output {s.name}: {len(s.joints)} joints for {len(s.dims)} dims ({s.type} needs one name per "
                                "dim: the guard's limits and the measured joints go by them)")
            if s.interface != "position":
                problems.append(f"output {s.name}: a {s.type} takes positions (the driver's position mode), not {s.interface}")
        if s.type == "joint_single" and len(s.dims) != 1:
            problems.append(f"output {s.name}: a joint_single takes one dim, got {len(s.dims)}")
        if s.steps and (s.type != "float64_array" or len(s.joints) != len(s.dims)):
            problems.append(f"output {s.name}: position_step needs a float64_array output with one joint per dim "
                            f"(the measured joints the steps are added to)")
        if s.type == "twist":
            if len(s.dims) != TWIST_DIMS:
                problems.append(f"output {s.name}: a twist takes {TWIST_DIMS} dims (linear xyz, angular xyz), got {len(s.dims)}")
            if not s.frame:
                problems.append(f"output {s.name}: a twist needs its frame (output_frames), e.g. the end effector's link")
            if not (math.isfinite(s.scale) and s.scale > 0):
                problems.append(f"output {s.name}: scale must be > 0, got {s.scale}")
    left = sorted(set(range(action_dim)) - set(owner))
    if specs and left:
        problems.append(f"action dims {left} go to no output (the actions have {action_dim} dims)")
    return problems


def step_problems(specs: Sequence[OutputSpec], joint_names: Sequence[str]) -> list[str]:
    """A position_step output adds its steps to measured positions: each of its joints must be read as state."""
    return [f"output {s.name}: position_step joints {missing} are not in joint_names (their measured positions are "
            "what the steps are added to)"
            for s in specs if s.steps and (missing := [j for j in s.joints if j not in joint_names])]


def step_targets(steps: np.ndarray, measured: np.ndarray | None) -> np.ndarray | None:
    """A position_step output's command: its joints' measured positions (in its joints' order, the robot's units)
    plus ``steps``; None without a measured position (nothing is commanded then)."""
    if measured is None:
        return None
    return np.asarray(measured, dtype=np.float64) + steps


def limits_for(spec: OutputSpec, joint_names: Sequence[str], lower: Sequence[float], upper: Sequence[float]) -> JointLimits:
    """Position limits of an output's joints, by name from ``joint_names``' limits (none for velocities)."""
    if spec.interface != "position" or spec.type == "twist" or not lower:
        return JointLimits()
    index = {name: i for i, name in enumerate(joint_names)}
    if not spec.joints or any(j not in index for j in spec.joints):
        return JointLimits()
    return JointLimits(tuple(lower[index[j]] for j in spec.joints), tuple(upper[index[j]] for j in spec.joints))


def stream_rows(timing_first: int, times_s: Sequence[float], start_ns: int, from_ns: int, until_ns: int) -> list[tuple[int, int]]:
    """(row, instant) of each row that becomes due in [from_ns, until_ns): row ``first + k`` from
    ``start + times_s[k - 1]`` (the first one at once) — what a streamed output sends, for offline replay."""
    out = []
    for k in range(len(times_s)):
        due = start_ns + (round(times_s[k - 1] * 1e9) if k else 0)
        end = start_ns + round(times_s[k] * 1e9)
        at = max(due, from_ns)
        if at < until_ns and end > from_ns:
            out.append((timing_first + k, at))
    return out


class ChunkStream:
    """The latest chunk for the streamed outputs and the row of it due at a given time (thread-safe: the
    model thread sets chunks, a timer reads them).

    Row ``first + k`` is due from ``start + times_s[k - 1]`` (included) until ``start + times_s[k]`` (``alignment``'s
    ChunkTiming: the action belongs to the end of its step, so at the instant a step starts its own row is due,
    as a trajectory follower's setpoint for the end of the step is); after the last one the chunk is over.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: np.ndarray | None = None
        self._times_s = np.zeros(0)
        self._start_ns = 0

    def set(self, actions: np.ndarray, start_ns: int, first: int, times_s: Sequence[float]) -> None:
        rows = np.asarray(actions, dtype=np.float64)[first : first + len(times_s)]
        with self._lock:
            self._rows, self._times_s, self._start_ns = rows, np.asarray(times_s, dtype=np.float64), int(start_ns)

    def clear(self) -> None:
        with self._lock:
            self._rows = None

    def due(self, now_ns: int) -> np.ndarray | None:
        """The action row due at ``now_ns``, or None (no chunk, or it is over)."""
        with self._lock:
            if self._rows is None:
                return None
            elapsed = (now_ns - self._start_ns) / 1e9
            k = int(np.searchsorted(self._times_s, elapsed + 1e-9, side="right"))  # a step boundary: the next row
            return self._rows[k] if k < len(self._rows) else None
