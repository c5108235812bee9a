"""Each shipped config/robots file with its limits, over DDS, driven by a model whose outputs are wild on purpose.

The real node runs the shipped config (as test_robot_contracts.py sets it up) on a real runtime whose published
actions are replaced: random steps up to a fifth of a joint's range beyond it, velocities and twists five times
their limits, a NaN burst, a chunk far out of every range and a model that freezes past its deadline. A stand-in
robot follows what it is commanded (a trajectory as a joint trajectory controller samples it, a position
command at once, velocities integrated) and publishes its joint states. A checker on every command topic holds
each command against the limits and the measured state when the node sent it (DDS's source timestamp: on a busy
machine this process may read a command long after); the holds and the stop input are timed by those send times.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import math
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import TwistStamped
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory

from layouts import REF_TINY, lerobot_folder, openpi_converted, openpi_norm_stats, random_model, stats_arrays
from oxygen_ros.interface import settings as S
from oxygen_ros.interface.convert import array_to_image, ns_to_stamp, stamp_to_ns
from oxygen_ros.ros.controller_outputs import msg_type as controller_msg_type
from oxygen_ros.ros.node import OxygenNode
from oxygen_ros.ros.safety_port import LATCHED
from oxygen_ros.runtime import PolicyRuntime
from ros_helpers import make_test_node, spin_for, spin_until, wait_for_match
from test_robot_contracts import CALIBRATION, shipped, tokenizer

RELIABLE = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
# A command is checked against every joint state the robot published this long before its arrival (the node's
# latest measurement may be that old on a loaded machine: DDS delivery and the executor's turn).
MEASURED_WITHIN_S = 0.5
# The node and this checker share one executor (and the machine its cores): a command is seen when the executor
# gets to it. The delays measured are printed; this is the slack the assertions allow on a loaded machine, plus
# how late the executor measurably was around the event (`Lateness`: on a busy machine, seconds at times).
EXECUTOR_TURN_S = 0.25
TOL = 1e-6
HISTORY_S = 10.0  # how long the stand-in robot keeps what it published
pytestmark = pytest.mark.usefixtures("one_torch_thread")
# The model's outputs, one entry per chunk it is asked for (then "wild" again until the test ends).
SCHEDULE = ["wild"] * 5 + ["nan"] + ["wild"] * 3 + ["far"] + ["wild"] * 3 + ["freeze"] + ["wild"] * 3


@pytest.fixture(scope="module")
def ros_context():  # noqa: ANN201
    rclpy.init()
    yield
    rclpy.shutdown()


# ------------------------------------------------------------------------------------ the robots
def setup(robot: str, tmp_path: Path) -> tuple[dict[str, Any], dict[str, float]]:
    """The shipped config with its limits on a tiny checkpoint, and the robot's joints at rest (every joint the
    driver reports, in its units)."""
    tok = tokenizer(tmp_path)
    if robot.startswith("aloha"):  # aloha: the Interbotix driver's streamed commands; aloha_ros2_control: JTCs
        folder = openpi_converted(tmp_path / "m", random_model(REF_TINY.replace(action_dim=16, action_horizon=50)),
                                  openpi_norm_stats(stats_arrays(14, -1.5, 2.5, seed=3), stats_arrays(14, -1.2, 1.2, seed=4)),
                                  "trossen")  # fmt: skip
        values = shipped(robot, folder, tok, guarded=True)
        arm = dict(waist=0.1, shoulder=-0.8, elbow=0.9, forearm_roll=0.05, wrist_angle=0.3, wrist_rotate=-0.2)
        rest = {f"{side}_{j}": v for side in ("left", "right") for j, v in arm.items()}
        rest.update(left_gripper=0.5, right_gripper=0.5, left_left_finger=0.04, right_left_finger=0.04)
    elif robot == "droid":
        folder = openpi_converted(tmp_path / "m", random_model(REF_TINY.replace(action_dim=8)),
                                  openpi_norm_stats(stats_arrays(8, -2.0, 2.0, seed=5), stats_arrays(8, -2.0, 2.0, seed=6)),
                                  "droid")  # fmt: skip
        values = shipped("droid", folder, tok, guarded=True)
        rest = {**{f"fr3_joint{i}": v for i, v in enumerate([0.1, -0.4, 0.2, -2.1, 0.05, 1.8, 0.7], 1)},
                "robotiq_85_left_knuckle_joint": 0.5}
    elif robot == "libero":
        folder = openpi_converted(tmp_path / "m", random_model(REF_TINY.replace(action_dim=7)),
                                  openpi_norm_stats(stats_arrays(8, -1.0, 1.0, seed=7), stats_arrays(7, -2.0, 2.0, seed=8)),
                                  "libero")  # fmt: skip
        values = shipped("libero", folder, tok, guarded=True)
        rest = {}
    else:
        fill = iter(f"{lo}, {hi}" for _, lo, hi in CALIBRATION)
        joint = [t.replace("FILL_IN, FILL_IN", next(fill)) for t in shipped("so101", tmp_path, tmp_path)["joint_conversions"]]
        fill = iter(f"{lo}, {hi}" for _, lo, hi in CALIBRATION)
        output = [";".join(p.replace("FILL_IN, FILL_IN", next(fill)) for p in text.split(";"))
                  for text in shipped("so101", tmp_path, tmp_path)["output_conversions"]]  # fmt: skip
        folder = lerobot_folder(tmp_path / "m", random_model(REF_TINY.replace(action_dim=6)), stats_arrays(6, -100.0, 100.0, seed=9),
                                stats_arrays(6, -150.0, 150.0, seed=10), cameras=("observation.images.front", "observation.images.wrist"))  # fmt: skip
        values = shipped("so101", folder, tok, guarded=True, joint_conversions=joint, output_conversions=output,
                         camera_features=["front", "wrist"], n_action_steps=10, replan="n_action_steps")  # fmt: skip
        rest = dict(shoulder_pan=0.0, shoulder_lift=-1.0, elbow_flex=1.0, wrist_flex=0.0, wrist_roll=0.0, gripper=0.5)
    return values, rest


@dataclasses.dataclass
class Injected:
    kinds: list[str] = dataclasses.field(default_factory=list)
    at: list[float] = dataclasses.field(default_factory=list)  # time.monotonic() each chunk left the model
    refused: bool = False  # the "far" chunk is out of range after the conversions (their clips may prevent it)


def wild_loader(settings: S.NodeSettings, deadline_s: float, seen: Injected, seed: int) -> Any:
    rng = np.random.default_rng(seed)

    def load(config: Any) -> PolicyRuntime:
        runtime = PolicyRuntime.load(config)
        inner = runtime._in_robot_units

        def injected(tick: Any, frame: Any, events: list) -> Any:
            result = inner(tick, frame, events)
            k = len(seen.kinds)
            kind = SCHEDULE[k] if k < len(SCHEDULE) else "wild"
            if kind == "freeze":
                time.sleep(deadline_s + 0.6)  # the model stalls past the deadline, then answers
            actions = wild_actions("far" if kind == "far" else "wild", rng, settings.outputs, settings.limits, result.actions.shape)
            if kind == "nan":
                actions[rng.integers(len(actions)) :, :] = np.nan
            if kind == "far":  # whether the outputs can be out of range at all (conversions that clip cannot)
                seen.refused = any(settings.limits[o.name].refusal(o.values(actions)) is not None for o in settings.outputs)
            seen.kinds.append(kind)
            seen.at.append(time.monotonic())
            return dataclasses.replace(result, actions=actions.astype(np.float32))

        runtime._in_robot_units = injected
        return runtime

    return load


def wild_actions(kind: str, rng: np.random.Generator, outputs: Any, limits: Any, shape: tuple[int, int]) -> np.ndarray:
    """Published actions whose commands (in the robot's units) step between random targets up to a fifth of a range
    beyond it (``far``: three ranges beyond), or ask five times the speed limits."""
    horizon = shape[0]
    x = np.zeros(shape)
    for spec in outputs:
        lim, n = limits[spec.name], len(spec.dims)
        lo, hi = np.array(lim.lower), np.array(lim.upper)
        span = np.where(np.isfinite(hi - lo), hi - lo, 2.0)
        centre = np.where(np.isfinite(hi + lo), (hi + lo) / 2, 0.0)
        if spec.type == "twist" or spec.interface == "velocity":
            vmax = np.array([v if math.isfinite(v) else 1.0 for v in lim.max_velocity])
            robot = rng.uniform(-5, 5, (horizon, n)) * (1.0 if spec.type == "twist" else vmax)
        elif kind == "far":
            robot = centre + rng.choice([-1.0, 1.0], (horizon, n)) * 3 * span
        else:
            targets = centre + rng.uniform(-0.7, 0.7, (4, n)) * span
            robot = targets[np.arange(horizon) * 4 // horizon]  # steps: four plateaus
        if spec.binarize is not None:
            model = np.where(rng.random((horizon, n)) < 0.5, spec.binarize.threshold - 1, spec.binarize.threshold + 1)
        else:
            model = spec.conversions.to_model(robot) if spec.conversions is not None else robot
        x[:, list(spec.dims)] = model
    return x


class Robot:
    """Follows its commands: a trajectory sampled as a JTC does (from where it was), a position at once, a
    velocity integrated; reports every joint it has."""

    def __init__(self, rest: dict[str, float]) -> None:
        self.q = dict(rest)
        self.plans: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}
        self.velocity: dict[str, float] = {}
        self._lock = threading.Lock()
        self._t = time.monotonic()
        self.history: collections.deque[tuple[float, dict[str, float]]] = collections.deque()

    def now(self, names: tuple[str, ...]) -> np.ndarray | None:
        self.advance()
        with self._lock:
            return np.array([self.q[n] for n in names]) if names and all(n in self.q for n in names) else None

    def published(self) -> dict[str, float]:
        """The joint state to publish now (kept: the checker compares commands with recent states)."""
        with self._lock:
            state = dict(self.q)
            self.history.append((time.monotonic(), state))
            while self.history and self.history[0][0] < time.monotonic() - HISTORY_S:
                self.history.popleft()
        return state

    def was_near(self, names: tuple[str, ...], values: np.ndarray, within: np.ndarray, since: float) -> bool:
        """Whether one joint state published since ``since`` had every joint within ``within`` of every row of
        ``values`` (the state the node measured)."""
        with self._lock:
            states = [st for t, st in self.history if t >= since] or [dict(self.q)]
        rows = np.atleast_2d(values)
        return any(np.all(np.abs(rows - np.array([st[n] for n in names])) <= within + TOL) for st in states)

    def trajectory(self, names: tuple[str, ...], times_ns: np.ndarray, positions: np.ndarray, now_ns: int) -> None:
        start = self.now(names)
        future = times_ns > now_ns  # a controller skips the points already past; all past: it goes to the last one
        if start is None or not len(times_ns):
            return
        if not np.any(future):
            times_ns, positions, future = np.array([now_ns + 1]), positions[-1:], np.array([True])
        with self._lock:
            self.plans[names] = (np.concatenate([[now_ns], times_ns[future]]), np.vstack([start, positions[future]]))

    def position(self, names: tuple[str, ...], values: np.ndarray) -> None:
        with self._lock:
            for n, v in zip(names, values):
                if n in self.q:
                    self.q[n] = float(v)

    def advance(self, now_ns: int | None = None) -> None:
        with self._lock:
            t = time.monotonic()
            dt, self._t = t - self._t, t
            for n, v in self.velocity.items():
                self.q[n] += v * dt
            if now_ns is not None:
                for names, (ts, ps) in self.plans.items():
                    for j, n in enumerate(names):
                        self.q[n] = float(np.interp(now_ns, ts, ps[:, j]))


class Lateness:
    """When this process ran the test's publishing (every ``every_s`` when the executor keeps up): a gap beyond
    ``every_s`` is time when neither the robot, nor the checker, nor the node's callbacks got their turn."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.calls: list[float] = []

    def tick(self) -> None:
        self.calls.append(time.monotonic())

    def within(self, t0: float, t1: float) -> float:
        """The longest stall of the executor between ``t0`` and ``t1`` (seconds beyond its period; 0 when on time)."""
        i = max(0, bisect.bisect_left(self.calls, t0) - 1)
        times = [*self.calls[i : bisect.bisect_right(self.calls, t1)], min(t1, time.monotonic())]
        return max([0.0, *(b - a - self.every_s for a, b in zip(times, times[1:]))])


@dataclasses.dataclass
class Checked:
    commands: int = 0
    holds: list[tuple[str, float]] = dataclasses.field(default_factory=list)  # (output, time the node sent it)
    moving: list[tuple[str, float]] = dataclasses.field(default_factory=list)  # non-hold commands (output, time the node sent it)
    violations: list[str] = dataclasses.field(default_factory=list)


def checker(driver: Any, s: S.NodeSettings, robot: Robot, out: Checked, late: Lateness) -> list[Any]:
    subs = []
    jitter = s.step_period_s  # the node's clock and its send times may differ by a step at most

    for spec in s.outputs:
        lim = s.limits[spec.name]
        vmax, dmax, lo, hi = (np.array(a) for a in lim.arrays())
        last: dict[str, Any] = {}

        def bad(msg: str, spec=spec) -> None:  # noqa: ANN001
            out.violations.append(f"{spec.name} at {time.monotonic():.3f}: {msg}")

        def on_msg(msg: Any, info: Any, spec=spec, lim=lim, vmax=vmax, dmax=dmax, lo=lo, hi=hi, last=last, bad=bad) -> None:  # noqa: ANN001
            # Commands are judged at the time the node sent them (DDS's source timestamp, on this machine's clock):
            # on a busy machine this executor may get to a message a second after it was sent.
            arrived = time.monotonic()
            sent_ns = int(info.get("source_timestamp", 0))
            t = arrived - max(0.0, (time.time_ns() - sent_ns) / 1e9) if sent_ns > 0 else arrived
            now_ns = driver.get_clock().now().nanoseconds
            measured = robot.now(spec.joints)
            out.commands += 1
            if spec.type == "joint_trajectory":
                pts = np.array([p.positions for p in msg.points]) if msg.points else np.zeros((0, len(spec.dims)))
                times = np.array([stamp_to_ns(p.time_from_start) for p in msg.points], dtype=np.float64)
                if not np.all(np.isfinite(pts)):
                    return bad("non-finite trajectory")
                if np.any(pts < lo - TOL) or np.any(pts > hi + TOL):
                    bad(f"trajectory out of range: {pts.min(0)} .. {pts.max(0)}")
                if len(pts) > 1 and np.any(np.abs(np.diff(pts, axis=0)) > vmax * np.diff(times)[:, None] / 1e9 + TOL):
                    bad("trajectory faster than max_velocity")
                if measured is not None and len(pts) and not robot.was_near(spec.joints, pts, dmax, t - MEASURED_WITHIN_S - late.within(t - HISTORY_S, t)):
                    bad(f"a point of {len(pts)} beyond max_distance of the measured {measured}: {pts}")
                hold = len(pts) == 1
                stamp = stamp_to_ns(msg.header.stamp) or now_ns
                robot.trajectory(spec.joints, stamp + times, pts, now_ns)
            elif spec.type == "twist":
                v = np.array([msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z,
                              msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z])  # fmt: skip
                if not np.all(np.isfinite(v)) or np.linalg.norm(v[:3]) > lim.max_linear_speed + TOL or np.linalg.norm(v[3:]) > lim.max_angular_speed + TOL:
                    bad(f"twist {v} beyond its speeds")
                hold = not np.any(v)
            else:
                v = np.atleast_1d(np.array(msg.cmd if spec.type in ("joint_group", "joint_single") else msg.data, dtype=np.float64))
                if not np.all(np.isfinite(v)):
                    return bad("non-finite command")
                dt = t - last["t"] if "t" in last else math.inf
                if spec.interface == "velocity":
                    if np.any(np.abs(v) > vmax + TOL):
                        bad(f"velocity {v} beyond {vmax}")
                    stopping = not np.any(v)  # a hold or a chunk's end stops at once (the controller's limits shape it)
                    if "v" in last and not stopping and np.any(np.abs(v - last["v"]) > lim.max_acceleration * (dt + jitter) + TOL):
                        bad(f"velocity change {v - last['v']} in {dt:.3f} s beyond max_acceleration")
                    hold = not np.any(v)
                    robot.velocity.update(dict(zip(spec.joints, v)))
                else:
                    if np.any(v < lo - TOL) or np.any(v > hi + TOL):
                        bad(f"position {v} out of range")
                    if measured is not None and not robot.was_near(spec.joints, v, dmax, t - MEASURED_WITHIN_S - late.within(t - HISTORY_S, t)):
                        bad(f"position {v} beyond max_distance of the measured {measured}")
                    if "v" in last and np.any(np.abs(v - last["v"]) > vmax * (dt + jitter) + TOL):
                        bad(f"position step {v - last['v']} in {dt:.3f} s beyond max_velocity {last.get('log')} now {v} {measured}")
                    # a hold: where the joints are, or the last command repeated (a hold sent again: it stays put)
                    hold = (measured is not None and np.allclose(v, measured, atol=1e-9)) or (
                        "v" in last and np.allclose(v, last["v"], atol=1e-12))
                    robot.position(spec.joints, v)
                last.setdefault("log", []).append((round(t, 3), v.tolist(), None if measured is None else measured.tolist()))
                last["log"] = last["log"][-4:]
                last["v"], last["t"] = v, t
            (out.holds if hold else out.moving).append((spec.name, t))

        msg_type = controller_msg_type(spec.type)
        subs.append(driver.create_subscription(msg_type, spec.topic, on_msg, RELIABLE))
    return subs


# ------------------------------------------------------------------------------------------ test
@pytest.mark.parametrize("robot_name", ["aloha", "aloha_ros2_control", "droid", "libero", "so101"])
def test_a_wild_model_never_breaks_a_limit(ros_context, tmp_path: Path, robot_name: str) -> None:
    values, rest = setup(robot_name, tmp_path)
    settings, _ = S.settings_from_values(values)
    period = settings.control_period_s
    n_steps = int(values.get("n_action_steps") or 1)
    deadline = n_steps * settings.step_period_s + 2 * period
    seen = Injected()
    node_name = f"wild_{robot_name}"
    node = OxygenNode(node_name, runtime_loader=wild_loader(settings, deadline, seen, seed=len(robot_name)),
                      parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])  # fmt: skip
    driver, executor = make_test_node(f"{node_name}_robot")
    executor.add_node(node)
    robot = Robot(rest)
    checked = Checked()
    late = Lateness(min(0.02, period / 2))
    subs = checker(driver, settings, robot, checked, late)
    statuses: list[tuple[str, dict[str, str]]] = []  # the safety status: its message and values
    driver.create_subscription(DiagnosticArray, "/diagnostics", lambda m: statuses.extend(
        (st.message, {kv.key: kv.value for kv in st.values}) for st in m.status if st.name.endswith("safety")), RELIABLE)  # fmt: skip
    cams = [driver.create_publisher(Image, t, qos_profile_sensor_data) for t in values["camera_topics"]]
    # One publisher per joint-state topic (ALOHA: one per puppet), each reporting its joints without its prefix.
    joints = [(j.prefix, driver.create_publisher(JointState, j.topic, qos_profile_sensor_data))
              for j in settings.joint_sources] if rest else []  # fmt: skip
    stop = driver.create_publisher(Bool, f"/{node_name}/stop", LATCHED)
    set_stop = driver.create_client(SetBool, f"/{node_name}/set_stop")
    assert wait_for_match(executor, [*cams, *subs])

    def publish() -> None:
        late.tick()
        now = driver.get_clock().now().nanoseconds
        robot.advance(now)
        for cam in cams:
            cam.publish(array_to_image(np.zeros((8, 8, 3), np.uint8), "rgb8", stamp=now))
        state = robot.published() if joints else {}
        for prefix, pub in joints:
            own = {n[len(prefix):]: v for n, v in state.items() if n.startswith(prefix)}
            msg = JointState(name=list(own), position=list(own.values()))
            msg.header.stamp = ns_to_stamp(now)
            pub.publish(msg)

    every = (late.every_s, publish)
    try:
        assert spin_until(executor, lambda: len(seen.kinds) >= len(SCHEDULE), timeout=120, every=every)
        # The stop input: set (latched topic), commands stop within a period while the model goes on; cleared
        # through the service, commands resume.
        stop.publish(Bool(data=True))
        t_stop = time.monotonic()
        chunks_at_stop = len(seen.kinds)
        spin_for(executor, max(1.5, 3 * deadline), every)
        assert len(seen.kinds) > chunks_at_stop  # the model went on
        assert set_stop.wait_for_service(timeout_sec=30.0)
        t_clear_asked = time.monotonic()  # the node may resume from here on (a reply may come after its next chunk)
        for _attempt in range(12):  # a reply can be lost while the service's reply writer still discovers the client
            future = set_stop.call_async(SetBool.Request(data=False))
            if spin_until(executor, future.done, timeout=5, every=every):
                break
        assert future.done() and future.result().success
        t_clear = time.monotonic()
        assert spin_until(executor, lambda: any(t > t_clear for _, t in checked.moving), timeout=30, every=every)
    finally:
        executor.shutdown()
        node.destroy_node()
        driver.destroy_node()

    timeline = ", ".join(f"{k}@{t:.3f}" for k, t in zip(seen.kinds, seen.at))
    assert not checked.violations, "\n".join(checked.violations[:10]) + f"\nchunks: {timeline}; stop@{t_stop:.3f} clear@{t_clear:.3f}"
    assert checked.commands > 20 and checked.moving
    holding = [s.name for s in settings.outputs if s.type != "float64_array" or s.interface == "velocity" or s.joints[0] in rest]
    def slack(t: float) -> float:  # what the executor's turn may add to a delay measured from t
        return EXECUTOR_TURN_S + late.within(t - 0.5, t + period + 2.0)

    # A NaN burst and a chunk far out of range: every output holds within one control period.
    already_held: set[str] = set()  # the bad chunks that came while every output already held (nothing new to send)
    for kind in ("nan", "far") if seen.refused else ("nan",):
        t_bad = seen.at[seen.kinds.index(kind)]
        for name in holding:
            before = [(t, "hold") for o, t in checked.holds if o == name and t < t_bad]
            before += [(t, "moving") for o, t in checked.moving if o == name and t < t_bad]
            if before and max(before)[1] == "hold":
                already_held.add(kind)
                continue  # already holding (the chunk before was late, or the model stalled): nothing new to send
            delays = [t - t_bad for o, t in checked.holds if o == name and t >= t_bad]
            assert delays and delays[0] <= period + slack(t_bad), (kind, name, delays[:3], slack(t_bad))
    # A frozen model: held within one period of its deadline (the last chunk came one chunk period before).
    t_freeze = seen.at[seen.kinds.index("freeze") - 1]
    for name in holding:
        before = [(t, "hold") for o, t in checked.holds if o == name and t <= t_freeze]
        before += [(t, "moving") for o, t in checked.moving if o == name and t <= t_freeze]
        if before and max(before)[1] == "hold":
            continue  # the chunk before the freeze commanded nothing (late on a busy machine): nothing to hold anew
        assert any(o == name and t_freeze < t <= t_freeze + deadline + n_steps * settings.step_period_s + period + 0.05
                   + late.within(t_freeze, t_freeze + deadline + 1.0) for o, t in checked.holds), ("freeze", name)  # fmt: skip
    # The stop: every output holds within one period, nothing moves until it is cleared.
    for name in holding:
        assert any(o == name and t_stop <= t <= t_stop + period + slack(t_stop) for o, t in checked.holds), ("stop", name, slack(t_stop))
    assert not [(o, t) for o, t in checked.moving if t_stop + period + slack(t_stop) < t < t_clear_asked]
    # /diagnostics: HOLD and STOP said while they last; the holds counted by kind, the limit hits by output and joint.
    assert any(m.startswith("HOLD") for m, _ in statuses) and any(m.startswith("STOP") for m, _ in statuses)
    final = statuses[-1][1]
    # Every bad chunk refused and counted (by output, joint and reason), whether or not commanding was going on when
    # it came: a hold is counted only when it starts (a NaN chunk while the outputs hold already starts none).
    bad_chunks = 1 + (1 if seen.refused else 0)  # the NaN burst, and the chunk far out of range where it can be
    assert int(final["refused_chunks"]) >= bad_chunks, (final["refused_chunks"], bad_chunks)
    assert any(k.startswith("refused/") and k.endswith("/non_finite") for k in final)
    assert int(final.get("holds/model_stall", 0)) >= 1
    assert any(k.startswith("limit/") for k in final)
    delays = {kind: min((t - seen.at[seen.kinds.index(kind)] for _, t in checked.holds if t >= seen.at[seen.kinds.index(kind)]),
                        default=None) for kind in ("nan", "far")}  # fmt: skip
    print(f"\nwild model on {robot_name}: {checked.commands} commands checked, {len(checked.violations)} beyond a limit; "
          f"first hold {1e3 * delays['nan']:.1f} ms after the NaN chunk (control period {1e3 * period:.0f} ms); "
          f"the executor's longest stall {1e3 * late.within(0, time.monotonic()):.0f} ms; "
          f"limit hits {sum(int(v) for k, v in final.items() if k.startswith('limit/'))}; holds "
          f"{ {k[6:]: int(v) for k, v in final.items() if k.startswith('holds/')} }")
