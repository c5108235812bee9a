"""`OxygenSimNode`: the simulated robot on ROS topics, a thin rclpy shell around `oxygen_ros.sim`.

It publishes both camera images (`sensor_msgs/Image`, rgb8, sensor-data QoS), `sensor_msgs/JointState`
and the episode's instruction (latched `std_msgs/String`); it executes `trajectory_msgs/JointTrajectory`
with ros2_control joint_trajectory_controller semantics (`oxygen_ros.sim.follower`) and joint velocities as a
velocity forward_command_controller's `std_msgs/Float64MultiArray`; it runs the episodes
one after another (`oxygen_ros.sim.runner`) and reports each start and outcome as JSON on ``~/episode``,
and the true subtask, scene note and answers to the demo's questions (``questions.scene_answers``) whenever
they change on ``~/labels`` (to judge the policy's text).
All times are the node clock's, or with ``publish_clock`` the simulator's own: each physics step then moves
simulated time by one physics period and publishes it on ``/clock`` (`rosgraph_msgs/Clock`), the cameras render
when simulated time says so, and a policy node started with ``use_sim_time`` follows it — slower than the wall
clock when the machine cannot keep up, never with a gap. Topic names are relative, so a namespace moves the
whole robot. Episodes are made one at a time as they start (`HeldOutEpisodes`): start-up and memory do not
grow with ``episodes``.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.clock import Clock as RclpyClock, ClockType
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.interface.convert import array_to_image, ns_to_stamp
from oxygen_ros.interface.outputs import from_trajectory_msg
from oxygen_ros.interface.param_spec import ConfigError, ParamSpec
from oxygen_ros.sim.delay import DelayLine
from oxygen_ros.sim.phrasing import FAMILIES
from oxygen_ros.sim.questions import scene_answers
from oxygen_ros.sim.render import render
from oxygen_ros.sim.runner import EpisodeEvent, EpisodeRunner, HeldOutEpisodes
from oxygen_ros.sim.scene import JOINT_NAMES

from oxygen_ros.ros.node_params import declare_parameters

__all__ = ["OxygenSimNode", "SIM_PARAMS"]

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
EPISODE_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)

BACKENDS = ("tabletop", "aloha")  # oxygen_sim_node's robots: this table-top arm, the MuJoCo ALOHA (aloha_sim_node)

# fmt: off
SIM_PARAMS = (
    ParamSpec("backend", "str", "tabletop", "The simulated robot: tabletop (this arm) or aloha (MuJoCo).", choices=BACKENDS),
    ParamSpec("episodes", "int", 3, "Episodes to run, one after another.", low=1, high=1_000_000),
    ParamSpec("seed", "int", 0, "Scene seed of the first episode (held-out seeds: [0, 1000000)).", low=0, high=999_999),
    ParamSpec("instructions", "str[]", [], "Instruction of each episode (cycled; '' = the one drawn from its seed)."),
    ParamSpec("instruction_family", "str", "plain", "How the seed's instruction is phrased: " + ", ".join(FAMILIES)
              + " (oxygen_ros/sim/phrasing.py; held-out words included).", choices=tuple(FAMILIES)),
    ParamSpec("time_limit_s", "float", 12.0, "An episode fails when not solved within this time.", low=0.0,
              high=3600.0, low_open=True),
    ParamSpec("settle_s", "float", 1.0, "Pause at the start of each episode: trajectories are dropped, the clock waits.",
              low=0.0, high=60.0),
    ParamSpec("image_size", "int", 64, "Side of the square camera images in pixels.", low=8, high=1024),
    ParamSpec("viewer_size", "int", 0, "Side of an extra, larger base view on viewer_topic (0 = none).", low=0, high=2048),
    ParamSpec("camera_rate_hz", "float", 10.0, "Camera images per second.", low=0.0, high=100.0, low_open=True),
    ParamSpec("physics_rate_hz", "float", 50.0, "Physics steps (and joint states) per second.", low=0.0, high=1000.0,
              low_open=True),
    ParamSpec("control_rate_hz", "float", 5.0, "The policy's rate: how far ahead a trajectory switch is measured.",
              low=0.0, high=1000.0, low_open=True),
    ParamSpec("base_camera_topic", "str", "camera/base/image_raw", "Base camera (sensor_msgs/Image)."),
    ParamSpec("wrist_camera_topic", "str", "camera/wrist/image_raw", "Wrist camera (sensor_msgs/Image)."),
    ParamSpec("viewer_topic", "str", "camera/viewer/image_raw", "The larger base view, when viewer_size > 0."),
    ParamSpec("joint_state_topic", "str", "joint_states", "sensor_msgs/JointState of the arm and gripper."),
    ParamSpec("instruction_topic", "str", "instruction", "std_msgs/String, latched: each episode's instruction."),
    ParamSpec("trajectory_topic", "str", "joint_trajectory_controller/joint_trajectory",
              "trajectory_msgs/JointTrajectory commands (joint trajectory controller semantics)."),
    ParamSpec("velocity_command_topic", "str", "forward_velocity_controller/commands",
              "std_msgs/Float64MultiArray joint velocities in joint_states order (a velocity forward_command_controller)."),
    ParamSpec("wait_for_commander_s", "float", 0.0, "Start the first episode only once a node publishes on "
              "trajectory_topic, waiting at most this long (0 = start at once).", low=0.0, high=3600.0),
    ParamSpec("wait_for_listener", "bool", False, "With wait_for_commander_s: also wait until someone subscribes "
              "to ~/episode (a recorder that must not miss the first episode)."),
    ParamSpec("exit_when_done", "bool", True, "Stop the node after the last episode."),
    ParamSpec("publish_clock", "bool", False, "Run on the simulator's own time and publish it on /clock (start "
              "the policy node with use_sim_time: true to follow it)."),
    ParamSpec("transport_delay_s", "float", 0.0, "Added each way, as a network link would: images and joint states "
              "are published this long after they were taken (stamped when taken), commands act this long after they "
              "arrive. For kernels without tc netem.", low=0.0, high=5.0),
)
# fmt: on


class OxygenSimNode(Node):
    """Raises `ConfigError` for bad parameters."""

    def __init__(self, node_name: str = "oxygen_sim_node", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        v = declare_parameters(self, SIM_PARAMS)
        problems = [r for spec in SIM_PARAMS if (r := spec.validate(v[spec.name]))]
        if problems:
            raise ConfigError("bad parameter: " + "; ".join(problems))
        self.v = v
        try:
            specs = HeldOutEpisodes(v["seed"], v["episodes"], v["instruction_family"], v["instructions"])
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        # Simulated time (publish_clock): advanced by one physics period per physics step, published on /clock.
        self._physics_ns = round(1e9 / v["physics_rate_hz"])
        self._sim_ns: int | None = self._physics_ns if v["publish_clock"] else None
        self._clock_pub = self.create_publisher(Clock, "/clock", QoSProfile(depth=10)) if v["publish_clock"] else None
        self._next_camera_ns = 0
        self.runner = EpisodeRunner(specs, 1.0 / v["control_rate_hz"], v["time_limit_s"], v["settle_s"])
        self.done = threading.Event()
        self._created_s = self._now_s()
        self._commander_seen = False
        self._held: EpisodeEvent | None = None  # the first episode's start while it waits for a commander
        self._lock = threading.Lock()  # the runner is used by the timers and the trajectory callback
        self._outbox = DelayLine(v["transport_delay_s"])  # observations on their way out
        self._inbox = DelayLine(v["transport_delay_s"])  # commands on their way in (used under the lock)

        self._base_pub = self.create_publisher(Image, v["base_camera_topic"], qos_profile_sensor_data)
        self._wrist_pub = self.create_publisher(Image, v["wrist_camera_topic"], qos_profile_sensor_data)
        self._viewer_pub = self.create_publisher(Image, v["viewer_topic"], RELIABLE) if v["viewer_size"] else None
        self._joint_pub = self.create_publisher(JointState, v["joint_state_topic"], qos_profile_sensor_data)
        self._instruction_pub = self.create_publisher(String, v["instruction_topic"], LATCHED)
        self._episode_pub = self.create_publisher(String, "~/episode", EPISODE_QOS)
        self._labels_pub = self.create_publisher(String, "~/labels", EPISODE_QOS)
        self._labels: tuple[tuple[str | None, str | None], dict[str, str]] | None = None
        self.create_subscription(JointTrajectory, v["trajectory_topic"], self._on_trajectory, RELIABLE)
        self.create_subscription(Float64MultiArray, v["velocity_command_topic"], self._on_velocity, RELIABLE)
        # With publish_clock the simulator is the clock: its steps are paced by the steady clock, whatever
        # use_sim_time says (following its own /clock it would never start).
        pace = RclpyClock(clock_type=ClockType.STEADY_TIME) if self._sim_ns is not None else None
        self.create_timer(1.0 / v["physics_rate_hz"], self._on_physics, clock=pace)
        if self._sim_ns is None:  # on simulated time the physics step renders when a frame is due
            self.create_timer(1.0 / v["camera_rate_hz"], self._on_camera)
        if v["transport_delay_s"] > 0:
            self.create_timer(0.002, self._on_transport, clock=pace)
        self.get_logger().info(
            f"ready: {len(specs)} episodes from seed {v['seed']}, {v['image_size']} px cameras at {v['camera_rate_hz']:g} Hz, "
            f"joints {list(JOINT_NAMES)}" + ("; publishing its own time on /clock" if self._sim_ns is not None else "")
        )

    def _now_ns(self) -> int:
        """Simulated time with publish_clock, else the node clock."""
        return self._sim_ns if self._sim_ns is not None else self.get_clock().now().nanoseconds

    def _now_s(self) -> float:
        return self._now_ns() / 1e9

    def _advance_clock(self) -> None:
        """One physics period of simulated time, published on /clock; renders the cameras when a frame is due."""
        if self._sim_ns is None or self._clock_pub is None:
            return
        self._sim_ns += self._physics_ns
        self._clock_pub.publish(Clock(clock=ns_to_stamp(self._sim_ns)))
        if self._sim_ns >= self._next_camera_ns:
            self._next_camera_ns = self._sim_ns + round(1e9 / self.v["camera_rate_hz"])
            self._on_camera()

    # ---------------------------------------------------------------------------------- episodes
    def _waiting_for_commander(self, now_s: float) -> bool:
        if self._commander_seen or now_s - self._created_s >= self.v["wait_for_commander_s"]:
            return False
        listener = not self.v["wait_for_listener"] or self._episode_pub.get_subscription_count() > 0
        commanders = self.count_publishers(self.v["trajectory_topic"]) + self.count_publishers(self.v["velocity_command_topic"])
        self._commander_seen = listener and commanders > 0
        return not self._commander_seen

    def _on_physics(self) -> None:
        self._advance_clock()
        now = self._now_s()
        waiting = self._waiting_for_commander(now)
        restated = None
        with self._lock:
            events = self.runner.update(now)
            if waiting:  # the first scene is shown; its clock waits for whoever sends trajectories
                self._held = self.runner.hold(now) or self._held
            elif self._held is not None:  # ... who is here now: the start again, with its real clock start
                restated, self._held = self._held, None
            episode = self.runner.episode
            state = episode.state.tolist() if episode is not None else None
            labels = (episode.subtask, episode.memory) if episode is not None else (None, None)
            answers = scene_answers(episode.scene) if episode is not None else {}
            index = self.runner.index
        for event in events:
            self._report(event, waiting=waiting)
        if restated is not None:
            self._report(restated, restated=True)
        if (labels, answers) != self._labels:  # the true subtask, scene note and answers, to judge the policy's text
            self._labels = (labels, answers)
            data = {"stamp_ns": self._now_ns(), "episode": index, "subtask": labels[0], "memory": labels[1],
                    "answers": answers}  # fmt: skip
            self._labels_pub.publish(String(data=json.dumps(data)))
        if state is not None:
            msg = JointState()
            msg.header.stamp = ns_to_stamp(self._now_ns())
            msg.name = list(JOINT_NAMES)
            msg.position = [float(x) for x in state]
            self._send(self._joint_pub, msg)
        if self.runner.finished and not self.done.is_set():
            self.get_logger().info(f"all {self.runner.ended} episodes done: {self.runner.succeeded} succeeded")
            self.done.set()

    def _report(self, event: EpisodeEvent, waiting: bool = False, restated: bool = False) -> None:
        """Log and publish an episode's start or end. A start held while waiting for a commander is published again
        once one is here (its real clock start); the log says the instruction once and then that it starts."""
        if event.kind == "start":
            self._instruction_pub.publish(String(data=event.spec.instruction))
            if restated:
                self.get_logger().info(f"episode {event.index + 1}: a commander is here, the episode starts")
            else:
                wait = f"; waiting for a commander on {self.v['trajectory_topic']}" if waiting else ""
                self.get_logger().info(f"episode {event.index + 1}: {event.spec.instruction!r} (seed {event.spec.seed}){wait}")
        else:
            outcome = f"success in {event.time_to_success_s:.1f} s" if event.success else "failed (time limit)"
            self.get_logger().info(f"episode {event.index + 1}: {outcome}")
        report = {**event.as_dict(), "stamp_ns": self._now_ns()}
        self._episode_pub.publish(String(data=json.dumps(report)))

    def _on_camera(self) -> None:
        with self._lock:
            episode = self.runner.episode
            if episode is None:
                return
            size, viewer = self.v["image_size"], self.v["viewer_size"]
            base, wrist = render(episode.scene, "base", size), render(episode.scene, "wrist", size)
            big = render(episode.scene, "base", viewer) if viewer else None
        stamp = self._now_ns()
        self._send(self._base_pub, array_to_image(base, stamp=stamp, frame_id="base_camera"))
        self._send(self._wrist_pub, array_to_image(wrist, stamp=stamp, frame_id="wrist_camera"))
        if big is not None and self._viewer_pub is not None:
            self._viewer_pub.publish(array_to_image(big, stamp=stamp, frame_id="base_camera"))

    def _send(self, publisher: Any, msg: Any) -> None:
        with self._lock:
            self._outbox.push(self._now_s(), lambda: publisher.publish(msg))

    def _on_transport(self) -> None:
        """Hand on what the delay lines hold once its time has come."""
        now = self._now_s()
        with self._lock:
            self._outbox.due(now)
            self._inbox.due(now)

    def flush(self, timeout_s: float = 3.0) -> None:
        """Wait (bounded) until the episode reports are acknowledged, before the node goes away."""
        self._episode_pub.wait_for_all_acked(Duration(seconds=timeout_s))

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        try:
            trajectory = from_trajectory_msg(msg)
        except ValueError as exc:
            self.get_logger().warning(f"trajectory refused: {exc}", throttle_duration_sec=2.0)
            return
        with self._lock:
            self._inbox.push(self._now_s(), lambda: self._receive(trajectory))

    def _receive(self, trajectory: Any) -> None:
        """A trajectory reaches the simulated controller (under the lock)."""
        episode = self.runner.episode
        before = len(episode.rejected) if episode else 0
        self.runner.receive(trajectory, self._now_s())
        rejected = episode.rejected[before:] if episode else []
        if rejected:
            self.get_logger().warning(f"trajectory rejected: {rejected[0]}", throttle_duration_sec=2.0)

    def _on_velocity(self, msg: Float64MultiArray) -> None:
        with self._lock:
            self._inbox.push(self._now_s(), lambda: self._receive_velocity(list(msg.data)))

    def _receive_velocity(self, velocities: list[float]) -> None:
        """A velocity command reaches the simulated controller (under the lock)."""
        episode = self.runner.episode
        before = len(episode.rejected) if episode else 0
        self.runner.receive_velocity(JOINT_NAMES, velocities, self._now_s())
        rejected = episode.rejected[before:] if episode else []
        if rejected:
            self.get_logger().warning(f"velocity command rejected: {rejected[0]}", throttle_duration_sec=2.0)
