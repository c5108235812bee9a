"""`AlohaSimNode`: the simulated ALOHA (MuJoCo) on the real robot's topics, in lockstep with its policy.

The ``aloha`` backend of ``oxygen_sim_node``; a thin rclpy shell around ``oxygen_ros.sim.aloha.driver``. It
publishes ``/clock`` (sim time), the joint states in the Interbotix driver's units (arm and gripper joints in
radians, fingers in metres), the three cameras as ``sensor_msgs/Image`` (rgb8) and the task's instruction
(latched); it executes each arm's ``trajectory_msgs/JointTrajectory`` (joint trajectory controller
semantics) and each gripper's ``std_msgs/Float64MultiArray`` (the gripper joint's radians).

Lockstep: the clock only moves when the policy has answered. Every ``query_every_steps`` steps the cameras
are rendered and published with the joint state, then ``/clock``; the simulation waits until every arm
topic brought a trajectory for that observation (stamped at or after it, or stamp 0 received after it), and
while a trajectory lasts, one command per step on each gripper topic that streams (not after a hold: a one-point
trajectory on both arms, the policy's answer to a refused chunk or a stop). A slow policy therefore
changes only the wall time. Waits are bounded by ``lockstep_timeout_s`` (then a warning, and the step runs
on the commands it has). Episode starts and ends go out as JSON on ``~/episode``; for the transfer cube, the
scene's truth in words (``scene_texts``: the phase, the memory note, the answers to its questions) as JSON on
``~/labels`` whenever it changes, stamped with the sim time it holds from, to judge a policy's texts by. With
``viewer_every_steps`` the cameras also go out side by side on ``viewer_topic`` that often (recordings).

With ``interbotix_robots`` (e.g. ``[follower_left, follower_right]``) the arms speak the Interbotix driver's
interface instead, as a real ALOHA's xs_sdk does (``oxygen_ros.sim.aloha.xs_sdk``): each robot takes
``JointGroupCommand`` on ``/<robot>/commands/joint_group`` (the arm group, six positions: the actuators' target
at once) and ``JointSingleCommand`` on ``/<robot>/commands/joint_single`` (the gripper joint's radians), refuses
a command of another group or joint, count or out of the joint limits (counted in ``xs_refused``, the reason
logged), and publishes ``/<robot>/joint_states`` (unprefixed names). In lockstep a query waits for a new command
on every one of those topics; each step between queries waits for every topic that had a command in the step
before (a streaming policy sends one per step while its chunk lasts).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

import numpy as np
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.interface.convert import array_to_image, ns_to_stamp, stamp_to_ns
from oxygen_ros.interface.outputs import from_trajectory_msg
from oxygen_ros.interface.param_spec import ConfigError, ParamSpec
from oxygen_ros.sim.aloha import scene_texts
from oxygen_ros.sim.aloha.driver import AlohaDriver, EpisodeRecord
from oxygen_ros.sim.aloha.physics import CAMERAS, TASKS
from oxygen_ros.sim.aloha.xs_sdk import CommandRefused, XsArm
from oxygen_ros.sim.follower import TrajectoryRejected

from oxygen_ros.ros.node_params import declare_parameters
from oxygen_ros.sim_ros.sim_node import BACKENDS

__all__ = ["AlohaSimNode", "ALOHA_PARAMS"]

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
EPISODE_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
ARMS = ("left", "right")
STREAM_GRACE_S = 0.5  # wall time a query waits for the new chunk's gripper command once its trajectories are in
OBSERVATION_LEAD_S = 0.02  # wall time between an observation and the clock tick that makes it due
LABELLED_TASK = "transfer_cube"  # the scene whose truth scene_texts tells

# fmt: off
ALOHA_PARAMS = (
    ParamSpec("backend", "str", "aloha", "The simulated robot: tabletop (the demo arm) or aloha (MuJoCo).", choices=BACKENDS),
    ParamSpec("task", "str", "transfer_cube", "gym-aloha scene.", choices=tuple(TASKS)),
    ParamSpec("episodes", "int", 3, "Episodes to run, one after another.", low=1, high=1_000_000),
    ParamSpec("seed", "int", 0, "Seed of the first episode (objects drawn as gym-aloha draws them).", low=0, high=2**31 - 1),
    ParamSpec("episode_steps", "int", 400, "Steps (of 20 ms) before an unsolved episode fails.", low=1, high=1_000_000),
    ParamSpec("steps_after_success", "int", 0, "Steps an episode runs on after reward 4 (a recording then shows the "
              "cube held by the left arm); the outcome is the step reward 4 came.", low=0, high=1_000_000),
    ParamSpec("instruction", "str", "Transfer cube", "The task's instruction (openpi's aloha_sim prompt)."),
    ParamSpec("instruction_topic", "str", "instruction", "std_msgs/String, latched."),
    ParamSpec("image_width", "int", 320, "Camera image width (4:3 as the real ALOHA's 640 × 480; three rgb8 images of "
              "that size sent best effort between processes lost fragments here).", low=8, high=2048),
    ParamSpec("image_height", "int", 240, "Camera image height.", low=8, high=2048),
    ParamSpec("fast_render", "bool", False, "No shadows and no anti-aliasing: about 10x cheaper, a different look."),
    ParamSpec("camera_names", "str[]", ["top", "left_wrist", "right_wrist"], "The scene's cameras, one per topic."),
    ParamSpec("camera_topics", "str[]", ["/cam_high/image_raw", "/cam_left_wrist/image_raw", "/cam_right_wrist/image_raw"],
              "sensor_msgs/Image topics, one per camera."),
    ParamSpec("joint_state_topic", "str", "/joint_states", "sensor_msgs/JointState in the driver's units."),
    ParamSpec("joint_prefixes", "str[]", ["left_", "right_"], "Prefix of each arm's joint names (left, right)."),
    ParamSpec("arm_joint_state_topics", "str[]", [], "Each arm's joint states also on a topic of its own with the names "
              "unprefixed, as Interbotix's puppets publish them (left, right); empty = joint_state_topic only."),
    ParamSpec("arm_trajectory_topics", "str[]", ["/left_arm_controller/joint_trajectory",
              "/right_arm_controller/joint_trajectory"], "Each arm's JointTrajectory commands (left, right)."),
    ParamSpec("gripper_command_topics", "str[]", ["/left_gripper_controller/commands",
              "/right_gripper_controller/commands"], "Each gripper's Float64MultiArray command, in rad (left, right)."),
    ParamSpec("interbotix_robots", "str[]", [], "The two puppets' Interbotix robot names (left, right), e.g. "
              "[follower_left, follower_right]: the arms then take xs_sdk's JointGroupCommand / JointSingleCommand on "
              "/<robot>/commands/joint_group and joint_single (arm_trajectory_topics and gripper_command_topics unused) "
              "and publish /<robot>/joint_states; empty = the ros2_control topics."),
    ParamSpec("interbotix_arm_group", "str", "arm", "The arm's joint group name in the Interbotix driver."),
    ParamSpec("interbotix_gripper", "str", "gripper", "The gripper's joint name in the Interbotix driver."),
    ParamSpec("query_every_steps", "int", 10, "The policy's period in steps: cameras are rendered and an answer is "
              "awaited every this many steps (its replan period: n_action_steps at 50 Hz).", low=1, high=100_000),
    ParamSpec("lockstep", "bool", True, "Wait for the policy (sim time stops meanwhile); false: run at wall-clock pace."),
    ParamSpec("lockstep_timeout_s", "float", 30.0, "Longest wall-time wait for an answer before stepping on.",
              low=0.0, high=3600.0, low_open=True),
    ParamSpec("wait_for_commander_s", "float", 60.0, "Start the first episode once every arm topic has a publisher, "
              "waiting at most this long in wall time.", low=0.0, high=3600.0),
    ParamSpec("exit_when_done", "bool", True, "Stop the node after the last episode."),
    ParamSpec("viewer_every_steps", "int", 0, "> 0: every this many steps the cameras side by side on viewer_topic "
              "(reliable; for recordings such as the demo's GIF); 0: none.", low=0, high=100_000),
    ParamSpec("viewer_topic", "str", "~/viewer/image_raw", "sensor_msgs/Image: the cameras side by side."),
    ParamSpec("viewer_size", "int", 0, "Each camera's width and height on the viewer, rendered apart (e.g. 224: a recording "
              "sharper than small policy images); 0: the policy's images themselves.", low=0, high=2048),
    ParamSpec("wait_for_listener", "bool", False, "With viewer_every_steps and wait_for_commander_s: the first episode "
              "also waits for a subscriber to the viewer (a recorder that must not miss the first frames)."),
)
# fmt: on


class AlohaSimNode(Node):
    """Raises `ConfigError` for bad parameters. Runs its simulation loop in a thread of its own."""

    def __init__(self, node_name: str = "oxygen_sim_node", seeds: list[int] | None = None, **kwargs: Any) -> None:
        """``seeds``: the episodes' seeds (default: ``seed`` … ``seed + episodes - 1``)."""
        super().__init__(node_name, **kwargs)
        v = declare_parameters(self, ALOHA_PARAMS)
        problems = [r for spec in ALOHA_PARAMS if (r := spec.validate(v[spec.name]))]
        problems += _wiring_problems(v)
        if problems:
            raise ConfigError("bad parameter: " + "; ".join(problems))
        self.v = v
        seeds = list(seeds) if seeds is not None else [v["seed"] + i for i in range(v["episodes"])]
        self.driver = AlohaDriver(seeds, v["task"], v["episode_steps"], tuple(v["joint_prefixes"]), v["fast_render"],
                                  v["steps_after_success"])  # fmt: skip
        self.done = threading.Event()
        self.on_step: Callable[[AlohaDriver], None] | None = None  # called after every step (recordings)
        # called as each episode starts, before its first observation (the lockstep loop in one process seeds the
        # policy's action noise with the episode's seed there, as the loop without DDS does)
        self.on_episode_start: Callable[[EpisodeRecord], None] | None = None
        self._timeouts_explained = False
        self.stats = {"queries": 0, "answers": 0, "stale_answers": 0, "timeouts": 0, "rejected": 0, "stream_commands": 0,
                      "render_s": 0.0, "frames": 0, "xs_commands": 0, "xs_refused": 0}  # fmt: skip
        self.robots = list(v["interbotix_robots"])  # Interbotix robot names (left, right); empty: ros2_control topics
        self.xs = XsArm(v["interbotix_arm_group"], v["interbotix_gripper"])
        self._cond = threading.Condition()
        self._inbox: list[tuple[str, int, Any]] = []  # (kind, arm, command) received, applied by the loop
        self._answered_ns = [-1, -1]  # per arm: the observation stamp the latest trajectory answers
        self._arrivals = [0, 0]  # per arm: trajectories received
        self._holding = [False, False]  # per arm: its latest trajectory is a hold (one point): no gripper stream
        self._gripper_msgs = [0, 0]  # per gripper topic: messages received
        self._grippers_at_answer = [0, 0]  # the counts when the latest trajectory arrived
        self._episode_pub = self.create_publisher(String, "~/episode", EPISODE_QOS)
        self._clock_pub = self.create_publisher(Clock, "/clock", RELIABLE)
        self._joint_pub = self.create_publisher(JointState, v["joint_state_topic"], qos_profile_sensor_data)
        arm_state_topics = [f"/{r}/joint_states" for r in self.robots] or v["arm_joint_state_topics"]
        self._arm_joint_pubs = [self.create_publisher(JointState, t, qos_profile_sensor_data) for t in arm_state_topics]
        self._camera_pubs = [self.create_publisher(Image, t, qos_profile_sensor_data) for t in v["camera_topics"]]
        self._instruction_pub = self.create_publisher(String, v["instruction_topic"], LATCHED)
        self._viewer_pub = self.create_publisher(Image, v["viewer_topic"], RELIABLE) if v["viewer_every_steps"] else None
        # The scene's truth in words (narration, memory note, answers), to judge the policy's texts by.
        self._labels_pub = self.create_publisher(String, "~/labels", EPISODE_QOS) if v["task"] == LABELLED_TASK else None
        self._labels: dict[str, Any] | None = None
        self._stream_topics = list(v["gripper_command_topics"])  # the streamed command topics waited for
        self._stream_msgs = [0] * 4 if self.robots else [0, 0]  # per stream topic: messages received
        self._stream_msgs_last_step = list(self._stream_msgs)
        if self.robots:
            self._subscribe_interbotix()
        else:
            for arm, topic in enumerate(v["arm_trajectory_topics"]):
                self.create_subscription(JointTrajectory, topic, lambda m, a=arm: self._on_trajectory(a, m), RELIABLE)
            for arm, topic in enumerate(v["gripper_command_topics"]):
                self.create_subscription(Float64MultiArray, topic, lambda m, a=arm: self._on_gripper(a, m), RELIABLE)
        self._stop = threading.Event()
        self._origin: float | None = None
        self._thread = threading.Thread(target=self._run, name="aloha_sim", daemon=True)
        self.get_logger().info(
            f"ready: ALOHA {v['task']}, {_seeds_text(seeds)}, cameras {list(v['camera_names'])} "
            f"at {v['image_width']}x{v['image_height']} every {v['query_every_steps']} steps, "
            f"{'lockstep' if v['lockstep'] else 'wall-clock pace'}; joints {self.driver.names}"
        )

    def start(self) -> None:
        """Start the simulation loop (the executor must be spinning to deliver the commands)."""
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=10.0)

    # ---------------------------------------------------------------------------------- commands in
    def _on_trajectory(self, arm: int, msg: JointTrajectory) -> None:
        try:
            trajectory = from_trajectory_msg(msg)
        except ValueError as exc:
            self.stats["rejected"] += 1
            self.get_logger().warning(f"{ARMS[arm]} arm trajectory refused: {exc}", throttle_duration_sec=2.0)
            return
        with self._cond:
            self._inbox.append(("arm", arm, trajectory))
            stamp = stamp_to_ns(msg.header.stamp)
            self._answered_ns[arm] = stamp if stamp else self.driver.time_ns
            self._arrivals[arm] += 1
            self._grippers_at_answer = list(self._gripper_msgs)  # the chunk's gripper commands follow it
            self._cond.notify_all()

    def _on_gripper(self, arm: int, msg: Float64MultiArray) -> None:
        with self._cond:
            self._inbox.append(("gripper", arm, list(msg.data)))
            self._gripper_msgs[arm] += 1
            self._stream_msgs[arm] += 1
            self._cond.notify_all()

    def _subscribe_interbotix(self) -> None:
        """xs_sdk's two command topics per robot; stream topics: both joint_group topics, then both joint_single."""
        from interbotix_xs_msgs.msg import JointGroupCommand, JointSingleCommand

        self._stream_topics = [f"/{r}/commands/joint_group" for r in self.robots] + [f"/{r}/commands/joint_single" for r in self.robots]
        for arm in range(2):
            self.create_subscription(JointGroupCommand, self._stream_topics[arm], lambda m, a=arm: self._on_group(a, m), RELIABLE)
            self.create_subscription(JointSingleCommand, self._stream_topics[2 + arm], lambda m, a=arm: self._on_single(a, m), RELIABLE)

    def _on_group(self, arm: int, msg: Any) -> None:
        with self._cond:
            self.stats["xs_commands"] += 1
            try:
                self._inbox.append(("group", arm, self.xs.group_command(msg.name, list(msg.cmd))))
            except CommandRefused as exc:
                self._refused(arm, exc)
            self._answered_ns[arm] = self.driver.time_ns
            self._arrivals[arm] += 1
            self._stream_msgs[arm] += 1
            self._cond.notify_all()

    def _on_single(self, arm: int, msg: Any) -> None:
        with self._cond:
            self.stats["xs_commands"] += 1
            try:
                self._inbox.append(("gripper", arm, [self.xs.single_command(msg.name, float(msg.cmd))]))
            except CommandRefused as exc:
                self._refused(arm, exc)
            self._gripper_msgs[arm] += 1
            self._stream_msgs[2 + arm] += 1
            self._cond.notify_all()

    def _refused(self, arm: int, exc: CommandRefused) -> None:
        self.stats["xs_refused"] += 1
        self.get_logger().warning(f"{self.robots[arm]}: command refused ({self.stats['xs_refused']} so far): {exc}",
                                  throttle_duration_sec=2.0)  # fmt: skip

    def _apply_inbox(self) -> None:
        """Hand the received commands to the controllers, in arrival order (under the condition's lock)."""
        for kind, arm, command in self._inbox:
            try:
                if kind == "arm":
                    self.driver.command_arm(arm, command)
                    self._holding[arm] = len(command.times_s) <= 1
                elif kind == "group":
                    self.driver.command_arm_positions(arm, command)
                    self.stats["stream_commands"] += 1
                else:
                    self.driver.command_gripper(arm, command)
                    self.stats["stream_commands"] += 1
            except (TrajectoryRejected, ValueError) as exc:
                self.stats["rejected"] += 1
                self.get_logger().warning(f"{ARMS[arm]} {kind} command rejected: {exc}", throttle_duration_sec=2.0)
        self._inbox.clear()

    # ------------------------------------------------------------------------------------ the loop
    def _run(self) -> None:
        try:
            self._wait_for_commander()
            self._instruction_pub.publish(String(data=self.v["instruction"]))
            while not self._stop.is_set() and not self.driver.finished:
                if self.driver.episode is None:
                    self._start_episode()
                    continue
                self._step()
        except Exception as exc:  # a robot never sees a traceback: say what broke and stop cleanly
            self.get_logger().error(f"simulation stopped: {type(exc).__name__}: {exc}")
        self.driver.physics.physics.free()  # the renderer's GL context belongs to this thread
        ok = sum(e.success for e in self.driver.episodes)
        broke = sum(e.failure is not None for e in self.driver.episodes)
        errors = f", {broke} ended by a physics error" if broke else ""
        self.get_logger().info(f"{len(self.driver.episodes)} episodes done: {ok} succeeded{errors}; {self.stats}")
        self.done.set()

    def _wait_for_commander(self) -> None:
        """Until a policy publishes on every arm topic and that same node listens to the clock, the joint states
        and every camera (DDS discovery takes up to seconds: an observation sent before it would be lost). Other
        subscribers, such as a recorder of the cameras, do not count."""
        deadline = time.monotonic() + self.v["wait_for_commander_s"]
        recorder = self._viewer_pub is not None and self.v["wait_for_listener"]
        while time.monotonic() < deadline and not self._stop.is_set():
            if self._commander_listens() and (not recorder or self._viewer_pub.get_subscription_count() > 0):
                return
            time.sleep(0.05)

    def _commander_listens(self) -> bool:
        def nodes(infos: list[Any]) -> set[tuple[str, str]]:
            return {(i.node_namespace, i.node_name) for i in infos}

        arm_topics = self._stream_topics[:2] if self.robots else self.v["arm_trajectory_topics"]
        commanders = [nodes(self.get_publishers_info_by_topic(t)) for t in arm_topics]
        policies = set.intersection(*commanders)  # the nodes that command every arm
        listened = [self._clock_pub, self._joint_pub, *self._camera_pubs]
        return bool(policies) and all(policies & nodes(self.get_subscriptions_info_by_topic(p.topic_name)) for p in listened)

    def _start_episode(self) -> None:
        with self._cond:
            self._inbox.clear()  # commands for the previous scene
            record = self.driver.start_next(self.v["query_every_steps"])
            self._answered_ns = [-1, -1]
            self._holding = [False, False]
            self._stream_msgs_last_step = list(self._stream_msgs)
        if record is not None and self.on_episode_start is not None:
            self.on_episode_start(record)
        if record is not None:
            self._report("start", record)
            if self.v["lockstep"]:  # a policy that seeds each episode (episode_topic) has the start before its frame
                self._episode_pub.wait_for_all_acked(Duration(seconds=1.0))
            self.get_logger().info(f"episode {record.index + 1}: seed {record.seed}")

    def _step(self) -> None:
        d, v = self.driver, self.v
        now_ns = d.time_ns
        query = d.step_count % v["query_every_steps"] == 0  # episodes start on this grid
        with self._cond:
            # Commands that came since the last step first: a hold that replaced the running chunk (a refusal, a
            # stop) ends its stream, so this step waits for no gripper command the policy no longer sends.
            self._apply_inbox()
            streams_before = list(self._gripper_msgs)
            arrivals_before = list(self._arrivals)
            live = [n > b for n, b in zip(self._stream_msgs, self._stream_msgs_last_step)]  # a command the step before
            self._stream_msgs_last_step = list(self._stream_msgs)
        self._publish_labels(now_ns)
        self._publish_observation(now_ns, images=query)
        if query and v["lockstep"]:
            time.sleep(OBSERVATION_LEAD_S)  # the observation reaches the policy before the clock wakes it
        self._clock_pub.publish(Clock(clock=ns_to_stamp(now_ns)))
        if v["lockstep"] and self.robots:
            self._wait_for_streams(query, live)
        elif v["lockstep"]:
            self._wait_for_answers(now_ns, query, streams_before, arrivals_before)
        else:
            time.sleep(max(0.0, d.time_ns / 1e9 + self._pace_origin() - time.monotonic()))
        with self._cond:
            self._apply_inbox()
        ended = d.step()
        if self.on_step is not None:
            self.on_step(d)
        if ended is not None:
            self._publish_viewer(self._render_viewer() if self._viewer_pub is not None else [], d.time_ns)  # the scene it ended in
            self._report("end", ended)
            say = self.get_logger().warning if ended.failure else self.get_logger().info
            say(f"episode {ended.index + 1}: {ended.outcome()}" + ("; the scene is reset for the next episode" if ended.failure else ""))

    def _pace_origin(self) -> float:
        """The wall time (monotonic) at which sim time 0 was, for lockstep: false."""
        if self._origin is None:
            self._origin = time.monotonic() - self.driver.time_ns / 1e9
        return self._origin

    def _wait_for_answers(self, now_ns: int, query: bool, streams_before: list[int], arrivals_before: list[int]) -> None:
        """Block (bounded) until the policy answered the observation of this step, or streamed this step's commands.

        A trajectory for an older observation that arrives after the query also answers it (the policy ticked
        before this observation reached it): counted as ``stale_answers``."""
        # A chunk still runs: its stream too. A hold (the policy's answer to a refused chunk or a stop: one point
        # per arm) streams nothing.
        streaming = self.driver.trajectory_end_s() * 1e9 > now_ns + 1 and not all(self._holding)
        gripper_topics = self.v["gripper_command_topics"]
        wants_stream = [self.count_publishers(t) > 0 for t in gripper_topics]

        streams = [i for i in range(2) if wants_stream[i] and (query or streaming)]

        def arms_answered() -> bool:
            return not query or all(a > b for a, b in zip(self._arrivals, arrivals_before))

        def grippers_sent(since: list[int]) -> bool:
            return all(self._gripper_msgs[i] > since[i] for i in streams)

        arms_at: float | None = None  # when the trajectories were all in

        def answered() -> bool:
            nonlocal arms_at
            if not arms_answered():
                return False
            arms_at = arms_at or time.monotonic()
            # At a query the new chunk's first gripper command follows its trajectories; a stream timer's
            # command of the old chunk may have come first, which is enough after a grace period.
            if grippers_sent(self._grippers_at_answer if query else streams_before):
                return True
            return query and grippers_sent(streams_before) and time.monotonic() - arms_at > STREAM_GRACE_S

        if query:
            self.stats["queries"] += 1
        elif not streams:
            return
        if not self._wait_until(answered, now_ns, query):
            return
        if query:
            self.stats["answers"] += 1
            if any(a < now_ns for a in self._answered_ns):
                self.stats["stale_answers"] += 1

    def _wait_for_streams(self, query: bool, live: list[bool]) -> None:
        """Interbotix topics: block (bounded) until every topic with a publisher brought a command after this step's
        observation at a query, or, between queries, every topic that had one in the step before."""
        before = list(self._stream_msgs_last_step)
        wanted = [i for i, topic in enumerate(self._stream_topics) if self.count_publishers(topic) > 0 and (query or live[i])]
        if query:
            self.stats["queries"] += 1
        elif not wanted:
            return
        brought = self._wait_until(lambda: all(self._stream_msgs[i] > before[i] for i in wanted), self.driver.time_ns, query)
        if brought and query:
            self.stats["answers"] += 1

    def _wait_until(self, done: Callable[[], bool], now_ns: int, query: bool) -> bool:
        """Block until ``done()`` (checked under the condition, at each command and at least every 50 ms), the
        node stopping, or ``lockstep_timeout_s``: False when the time ran out (counted and said)."""
        deadline = time.monotonic() + self.v["lockstep_timeout_s"]
        with self._cond:
            while not self._stop.is_set() and not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    self.stats["timeouts"] += 1
                    self._warn_timeout(now_ns, query)
                    return False
                self._cond.wait(timeout=min(left, 0.05))
        return True

    def _warn_timeout(self, now_ns: int, query: bool) -> None:
        """A lockstep wait ran out: the causes in full the first time, one short line after that."""
        what = "trajectory for the observation" if query else "gripper command for the step"
        line = (f"no {what} at {now_ns / 1e9:.2f} s (sim time) within {self.v['lockstep_timeout_s']:g} s: stepping on "
                f"with the last commands ({self.stats['timeouts']} timeouts)")  # fmt: skip
        if self._timeouts_explained:
            self.get_logger().warning(line, throttle_duration_sec=5.0)
            return
        self._timeouts_explained = True
        self.get_logger().warning(
            f"{line}. Likely causes: the policy refuses the images (its camera_widths/camera_heights must be this "
            f"node's image_width x image_height, {self.v['image_width']}x{self.v['image_height']}: its log names the "
            f"size it wants); query_every_steps {self.v['query_every_steps']} is not the policy's replan period; large "
            "images sent best effort between processes are lost")  # fmt: skip

    def _publish_observation(self, now_ns: int, images: bool) -> None:
        stamp = ns_to_stamp(now_ns)
        positions = [float(x) for x in self.driver.joint_positions()]
        msg = JointState(name=self.driver.names, position=positions)
        msg.header.stamp = stamp
        self._joint_pub.publish(msg)
        per_arm = len(self.driver.names) // 2
        for arm, (pub, prefix) in enumerate(zip(self._arm_joint_pubs, self.driver.prefixes)):
            names = [n[len(prefix):] for n in self.driver.names[arm * per_arm : (arm + 1) * per_arm]]
            pub.publish(JointState(header=msg.header, name=names, position=positions[arm * per_arm : (arm + 1) * per_arm]))
        viewer = self._viewer_pub is not None and self.driver.episodes[-1].steps % self.v["viewer_every_steps"] == 0
        if not images and not viewer:
            return
        frames = self._render() if images or not self.v["viewer_size"] else []
        if images:
            for camera, pub, frame in zip(self.v["camera_names"], self._camera_pubs, frames):
                pub.publish(array_to_image(frame, stamp=now_ns, frame_id=camera))
            self.stats["frames"] += len(self._camera_pubs)
        if viewer:
            self._publish_viewer(self._render_viewer() if self.v["viewer_size"] else frames, now_ns)

    def _render(self, height: int = 0, width: int = 0) -> list[np.ndarray]:
        started = time.perf_counter()
        height, width = height or self.v["image_height"], width or self.v["image_width"]
        frames = [self.driver.physics.render(c, height, width) for c in self.v["camera_names"]]
        self.stats["render_s"] += time.perf_counter() - started
        return frames

    def _render_viewer(self) -> list[np.ndarray]:
        """The cameras for the viewer: at ``viewer_size`` when set, else the policy's images."""
        size = self.v["viewer_size"]
        return self._render(size, size) if size else self._render()

    def _publish_viewer(self, frames: list[np.ndarray], now_ns: int) -> None:
        if self._viewer_pub is not None:
            self._viewer_pub.publish(array_to_image(np.concatenate(frames, axis=1), stamp=now_ns, frame_id="viewer"))

    def _publish_labels(self, now_ns: int) -> None:
        """The true phase, memory note and answers of the scene now, on ``~/labels`` whenever they change."""
        if self._labels_pub is None:
            return
        physics = self.driver.physics
        truth = {"subtask": scene_texts.phase(physics), "memory": scene_texts.memory_note(physics),
                 "answers": {q: scene_texts.answer(physics, q) for q in scene_texts.QUESTIONS}}  # fmt: skip
        index = self.driver.episodes[-1].index
        if {**truth, "episode": index} != self._labels:
            self._labels = {**truth, "episode": index}
            self._labels_pub.publish(String(data=json.dumps({"stamp_ns": now_ns, **self._labels})))

    def _report(self, event: str, record: EpisodeRecord) -> None:
        data = {**record.as_dict(event), "stamp_ns": self.driver.time_ns, "instruction": self.v["instruction"]}
        self._episode_pub.publish(String(data=json.dumps(data)))

    def flush(self, timeout_s: float = 3.0) -> None:
        """Wait (bounded) until the episode reports are acknowledged, before the node goes away."""
        self._episode_pub.wait_for_all_acked(Duration(seconds=timeout_s))


def _wiring_problems(v: dict[str, Any]) -> list[str]:
    problems = []
    if len(v["camera_names"]) != len(v["camera_topics"]):
        problems.append(f"camera_names has {len(v['camera_names'])} entries for {len(v['camera_topics'])} camera_topics")
    unknown = [c for c in v["camera_names"] if c not in CAMERAS]
    if unknown:
        problems.append(f"camera_names {unknown} are not cameras of the scene {list(CAMERAS)}")
    if v["interbotix_robots"] and len(v["interbotix_robots"]) != 2:
        problems.append(f"interbotix_robots needs two entries (left, right) or none, got {len(v['interbotix_robots'])}")
    if v["arm_joint_state_topics"] and len(v["arm_joint_state_topics"]) != 2:
        problems.append(f"arm_joint_state_topics needs two entries (left, right) or none, got {len(v['arm_joint_state_topics'])}")
    for key in ("joint_prefixes", "arm_trajectory_topics", "gripper_command_topics"):
        if len(v[key]) != 2:
            problems.append(f"{key} needs two entries (left, right), got {len(v[key])}")
    return problems


def _seeds_text(seeds: list[int]) -> str:
    """"3 episodes, seeds 12345-12347" (consecutive) or the seeds listed."""
    consecutive = seeds == list(range(seeds[0], seeds[0] + len(seeds)))
    listed = f"{seeds[0]}-{seeds[-1]}" if consecutive and len(seeds) > 1 else ", ".join(map(str, seeds))
    return f"{len(seeds)} episode{'s' if len(seeds) != 1 else ''}, seed{'s' if len(seeds) != 1 else ''} {listed}"
