"""The simulated ALOHA stack below ROS: what ``oxygen_sim_node``'s ``aloha`` backend runs, no ROS types.

It stands where the real robot's drivers and controllers stand: a joint trajectory controller per arm (six
joints, ``TimedTrajectory`` with ros2_control JTC semantics, ``oxygen_ros.sim.follower``), a forward command
controller per gripper taking the gripper joint's radians, and joint states in the Interbotix driver's units
(``units``): per arm the six joints and the gripper joint in radians, the two fingers in metres. The arm
actuators get the trajectory's setpoint for the end of each step (an action of a chunk belongs to the end of
its step, as in gym-aloha where action k is the target during step k); the gripper's finger goes where the
joint command puts it. Episodes run one after another on one clock (sim time, from 0), each ending at
reward 4 (or ``steps_after_success`` later), after ``episode_steps``, or at a physics error (failed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from oxygen_ros.runtime.trajectory import TimedTrajectory

from ..follower import TrajectoryFollower, TrajectoryRejected
from .physics import SUCCESS_REWARD, AlohaPhysics, PhysicsError, physics_failure
from .units import ARM_JOINTS, DT, START_ARM, finger_to_gripper_joint, gripper_joint_to_finger

NS = 1_000_000_000
# The setpoint is the actuators' target: MuJoCo's position actuators do the tracking, the follower does not limit it.
MAX_VELOCITY = 1e6  # rad/s
FINGERS = ("left_finger", "right_finger")  # the Interbotix gripper's finger joints (the right one mirrored)


def joint_names(prefixes: tuple[str, str] = ("left_", "right_")) -> list[str]:
    """The joint state's names: per arm (prefix) its six joints, ``gripper`` and the two fingers."""
    return [f"{p}{j}" for p in prefixes for j in (*ARM_JOINTS, "gripper", *FINGERS)]


@dataclass
class EpisodeRecord:
    index: int
    seed: int
    start_step: int  # the global step at which it started
    steps: int = 0
    success_step: int | None = None  # steps into the episode at which reward 4 came
    best_reward: int = 0
    failure: dict | None = None  # why it ended early: {"reason": "physics_error", "step", "joint", "message"}

    @property
    def success(self) -> bool:
        return self.success_step is not None

    def ended(self, episode_steps: int, steps_after_success: int = 0) -> bool:
        """At the step limit, a physics error, or ``steps_after_success`` steps after reward 4 came."""
        after = self.success_step is not None and self.steps >= self.success_step + steps_after_success
        return self.steps >= episode_steps or self.failure is not None or after

    def as_dict(self, event: str) -> dict:
        return {"event": event, "index": self.index, "seed": self.seed, "success": self.success,
                "success_step": self.success_step, "steps": self.steps, "best_reward": self.best_reward,
                "failure": self.failure, "clock_start_ns": round(self.start_step * DT * NS)}  # fmt: skip

    def outcome(self) -> str:
        """One line for a log: success, a physics error (step, joint) or no hand-over."""
        if self.success:
            return f"success at step {self.success_step}"
        if self.failure is not None:
            return f"failed: {failure_text(self.failure)}"
        return f"failed (best reward {self.best_reward})"


def failure_text(failure: dict) -> str:
    """An episode's early failure in words: "physics_error at step 37 (joint right_shoulder): ..."."""
    joint = f" (joint {failure['joint']})" if failure.get("joint") else ""
    message = f": {failure['message']}" if failure.get("message") else ""
    return f"{failure['reason']} at step {failure['step']}{joint}{message}"


@dataclass
class AlohaDriver:
    seeds: list[int]
    task_name: str = "transfer_cube"
    episode_steps: int = 400
    prefixes: tuple[str, str] = ("left_", "right_")
    fast_render: bool = False
    steps_after_success: int = 0  # an episode runs on this long after reward 4 (a recording shows the hand-over end)
    physics: AlohaPhysics = field(init=False)
    episodes: list[EpisodeRecord] = field(default_factory=list, init=False)
    step_count: int = field(default=0, init=False)  # global steps: sim time = step_count · DT

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("no episodes to run")
        if self.episode_steps < 1:
            raise ValueError(f"episode_steps must be >= 1, got {self.episode_steps}")
        self.physics = AlohaPhysics(self.task_name, fast_render=self.fast_render)
        self.names = joint_names(self.prefixes)
        self.arm_joint_names = [tuple(f"{p}{j}" for j in ARM_JOINTS) for p in self.prefixes]
        self._followers: list[TrajectoryFollower] = []
        self._goals: list[np.ndarray | None] = [None, None]  # per arm: a position goal (Interbotix joint_group)
        self._gripper_rad = np.zeros(2)

    # ------------------------------------------------------------------------------------------ episodes
    @property
    def time_ns(self) -> int:
        return round(self.step_count * DT * NS)

    @property
    def episode(self) -> EpisodeRecord | None:
        """The episode running now (None before the first and after the last)."""
        if not self.episodes or self.episodes[-1].ended(self.episode_steps, self.steps_after_success):
            return None
        return self.episodes[-1]

    @property
    def finished(self) -> bool:
        return len(self.episodes) == len(self.seeds) and self.episode is None

    def start_next(self, grid_steps: int = 1) -> EpisodeRecord | None:
        """Reset the scene for the next seed (None when all ran); the controllers hold the start pose. The
        clock first moves on to the next multiple of ``grid_steps`` (a policy that replans every that many
        steps sees each episode start on its own schedule)."""
        if len(self.episodes) >= len(self.seeds):
            return None
        # Never at 0: a node on sim time reads 0 before the first /clock, and a timer does not fire for a clock
        # that does not move.
        self.step_count = max(grid_steps, -(-self.step_count // grid_steps) * grid_steps)
        record = EpisodeRecord(len(self.episodes), self.seeds[len(self.episodes)], self.step_count)
        self.episodes.append(record)
        self.physics.reset(record.seed)
        now = self.step_count * DT
        self._followers = [TrajectoryFollower(names, np.array(START_ARM), np.full(6, MAX_VELOCITY), now_s=now)
                           for names in self.arm_joint_names]  # fmt: skip
        self._goals = [None, None]
        self._gripper_rad = finger_to_gripper_joint(self.physics.finger_positions())
        return record

    # ------------------------------------------------------------------------------------------ commands
    def command_arm(self, arm: int, trajectory: TimedTrajectory) -> None:
        """A JointTrajectory for arm 0 (left) or 1 (right), received now; raises TrajectoryRejected."""
        if self.episode is None:
            raise TrajectoryRejected("no episode is running")
        self._followers[arm].command(trajectory, self.step_count * DT)
        self._goals[arm] = None

    def command_arm_positions(self, arm: int, positions: list[float]) -> None:
        """A position goal for the six joints of arm 0 (left) or 1 (right), as the Interbotix driver takes a
        joint_group command in position mode: the actuators' target from the next step on, until the next one."""
        if self.episode is None:
            raise ValueError("no episode is running")
        goal = np.asarray(positions, dtype=np.float64)
        if goal.shape != (len(ARM_JOINTS),) or not np.all(np.isfinite(goal)):
            raise ValueError(f"an arm goal is {len(ARM_JOINTS)} finite positions, got {positions}")
        self._goals[arm] = goal

    def command_gripper(self, arm: int, values: list[float]) -> None:
        """A forward command for one gripper: one value, the gripper joint's radians."""
        if len(values) != 1 or not np.isfinite(values[0]):
            raise ValueError(f"a gripper command is one finite value (the gripper joint in rad), got {values}")
        self._gripper_rad[arm] = float(values[0])

    def trajectory_end_s(self) -> float:
        """When the last commanded arm trajectory point is reached (sim time, 0 when none)."""
        ends = [f.end_time_s for f in self._followers if f.end_time_s is not None]
        return max(ends, default=0.0)

    # ---------------------------------------------------------------------------------------------- step
    def joint_positions(self) -> np.ndarray:
        """The joint state in the driver's units, in ``names`` order."""
        arms, fingers = self.physics.arm_positions(), self.physics.finger_positions()
        grippers = finger_to_gripper_joint(fingers)
        per_arm = [np.concatenate([arms[6 * i : 6 * i + 6], [grippers[i], fingers[i], -fingers[i]]]) for i in range(2)]
        return np.concatenate(per_arm)

    def dataset_state(self) -> np.ndarray:
        """The state as ALOHA's datasets and openpi's real_env report it: joints (rad), grippers normalized."""
        return self.physics.dataset_state()

    def step(self) -> EpisodeRecord | None:
        """One control step of the running episode; returns its record when this step ended it. MuJoCo finding
        the state unstable (``PhysicsError``: a NaN, Inf or huge acceleration, e.g. from commands far outside
        the joints' range) ends the episode as failed, with the step and the joint in ``record.failure``; the
        next ``start_next`` resets the scene."""
        record = self.episode
        if record is None:
            return None
        end = (self.step_count + 1) * DT  # the setpoint for the end of this step
        targets = np.concatenate([f.setpoint(end) if goal is None else goal for f, goal in zip(self._followers, self._goals)])
        self.physics.set_arm_targets(targets)
        fingers = gripper_joint_to_finger(self._gripper_rad)
        self.physics.set_finger_targets(float(fingers[0]), float(fingers[1]))
        try:
            self.physics.step()
        except PhysicsError as exc:
            self.step_count += 1
            record.steps += 1
            record.failure = physics_failure(self.physics, record.steps, exc, self.prefixes)
            return record
        self.step_count += 1
        record.steps += 1
        reward = self.physics.reward()
        record.best_reward = max(record.best_reward, reward)
        if reward >= SUCCESS_REWARD and record.success_step is None:
            record.success_step = record.steps
        return record if self.episode is None else None
