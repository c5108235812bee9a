"""One MuJoCo ALOHA episode in simulated time, for the ROS-free closed loop (`oxygen_ros.sim.evaluate`).

The robot is the simulated driver stack the sim node runs (``driver.AlohaDriver``): a joint trajectory
controller per arm whose setpoint for the end of each 20 ms step goes to the arm's actuators, a gripper that
takes the gripper joint's radians, joint states in the Interbotix driver's units. A params file's wiring
stands between it and the policy, as on the robot: the state is the file's ``joint_names`` read from the
joint state (``joint_conversions`` then turn it into the model's units inside the runtime), and a chunk's
14 action dims go out through the file's outputs and their ``output_conversions``. The grippers follow their
commands as the arms do (the setpoint for the end of each step: an action of a chunk belongs to the end of
its step). A trajectory delivered between two steps is received at the start of the next one, as the
lockstep sim node applies its commands between steps.

The episode ends at gym-aloha's reward 4 or after the step limit. Its texts' truth comes from the physics
(``scene_texts``): the narration label is the phase, the memory label the scene note; questions are drawn
from ``scene_texts.QUESTIONS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from oxygen_ros.runtime.outputs import OutputSpec
from oxygen_ros.runtime.safety import OutputLimits, SafetyGuard, hold_trajectory
from oxygen_ros.runtime.trajectory import TimedTrajectory

from ..follower import TrajectoryFollower, TrajectoryRejected
from . import scene_texts
from .dataset import CAMERAS, INSTRUCTION  # the policy's image slots and prompt, as it was trained
from .driver import MAX_VELOCITY, NS, AlohaDriver
from .env import camera_images
from .expert import EPISODE_STEPS  # ACT's transfer-cube episode length
from .units import DT, finger_to_gripper_joint


class WiringError(ValueError):
    """A params file's joints or outputs do not fit the simulated ALOHA's drivers."""


@dataclass(frozen=True)
class AlohaWiring:
    """How a params file meets the drivers: the state's joint names, the outputs (dims, conversions) and the
    cameras' size (width, height) its ``camera_widths``/``camera_heights`` ask for (None: any, the model's)."""

    state_joints: tuple[str, ...]
    outputs: tuple[OutputSpec, ...]
    limits: Mapping[str, OutputLimits] = field(default_factory=lambda: MappingProxyType({}))  # the guard's, per output
    resume_blend_s: float = 0.0  # the guard's blend from the measured state after a hold or at the start
    camera_size: tuple[int, int] | None = None

    @property
    def action_joints(self) -> tuple[str, ...]:
        """One name per action dim (the outputs' joints, in dim order): the trajectory's joints."""
        names: dict[int, str] = {}
        for spec in self.outputs:
            for d, joint in zip(spec.dims, spec.joints or ()):
                names[d] = joint
        if sorted(names) != list(range(len(names))):
            raise WiringError(f"the outputs name no joint for action dims {sorted(set(range(max(names, default=-1) + 1)) - set(names))}")
        return tuple(names[d] for d in range(len(names)))


@dataclass(frozen=True)
class AlohaEpisodeSpec:
    """An episode: the seed that places the cube, the instruction, the wiring. ``on_start`` sees each episode
    made from it (a caller that needs the running physics, e.g. the scripted expert as the model)."""

    seed: int
    wiring: AlohaWiring
    instruction: str = INSTRUCTION
    task: str = "transfer_cube"
    fast_render: bool = True  # the training data's look: no shadows, no anti-aliasing
    family: str = "plain"
    target_name: str = "cube"
    steps_after_success: int = 0  # steps run on after reward 4 (a recording shows the left arm holding the cube)
    on_start: Callable[["AlohaEpisode"], None] | None = field(default=None, compare=False, repr=False)

    def make_episode(self, control_period_s: float, time_limit_s: float) -> "AlohaEpisode":
        episode = AlohaEpisode(self, max(1, round(time_limit_s / DT)))
        if self.on_start is not None:
            self.on_start(episode)
        return episode


class AlohaEpisode:
    def __init__(self, spec: AlohaEpisodeSpec, episode_steps: int = EPISODE_STEPS) -> None:
        self.spec = spec
        self.driver = AlohaDriver([spec.seed], spec.task, episode_steps, fast_render=spec.fast_render,
                                  steps_after_success=spec.steps_after_success)  # fmt: skip
        self.record = self.driver.start_next()
        self.physics = self.driver.physics
        self._origin_step = self.driver.step_count  # the driver's clock never starts at 0; the episode's does
        self._state_index = _indices(self.driver.names, spec.wiring.state_joints, "joint_names")
        self._action_joints = spec.wiring.action_joints
        self._arms, self._grippers = _controllers(self.driver, spec.wiring.outputs)
        now = self.driver.step_count * DT
        start_rad = finger_to_gripper_joint(self.physics.finger_positions())
        self._gripper_followers = [TrajectoryFollower((name,), start_rad[i : i + 1], np.array([MAX_VELOCITY]), now_s=now)
                                   for i, name in enumerate(_gripper_names(self.driver))]  # fmt: skip
        self._pending: list[tuple[float, int, TimedTrajectory]] = []
        self._delivered = 0
        self.location = scene_texts.place(scene_texts.cube_position(self.physics))  # where the cube started
        self.absent = False
        self.rejected: list[str] = []
        self.switches: list = []  # (the table-top's trajectory-switch records; none kept here)
        self.arm_log = [self.physics.arm_positions()]
        # The node's guard between the outputs and the controllers (oxygen_ros/runtime/safety), on the same clock.
        self.guard = SafetyGuard(spec.wiring.outputs, spec.wiring.limits, DT, spec.wiring.resume_blend_s)
        self.holds: list[str] = []  # why each hold came
        self.on_step: Callable[[AlohaEpisode], None] | None = None  # after every physics step (recordings)

    # ------------------------------------------------------------------------------------------ time
    @property
    def steps(self) -> int:
        return self.record.steps

    @property
    def time_s(self) -> float:
        return self.steps * DT

    @property
    def done(self) -> bool:
        return self.driver.episode is None

    @property
    def succeeded(self) -> bool:
        return self.record.success

    @property
    def failure(self) -> dict | None:
        """Why the episode ended early as failed (MuJoCo's physics error: step, joint, message), else None."""
        return self.record.failure

    @property
    def success_time_s(self) -> float | None:
        return None if self.record.success_step is None else self.record.success_step * DT

    # ----------------------------------------------------------------------------------- observation
    def images(self, size: int) -> tuple[np.ndarray, ...]:
        """cam_high and the two wrist cameras at the params file's camera size, else square at ``size`` (the
        model's, as the training data renders them): what the simulator node sends the policy node."""
        width, height = self.spec.wiring.camera_size or (size, size)
        return tuple(camera_images(self.physics, height, width, CAMERAS).values())

    @property
    def state(self) -> np.ndarray:
        """The params file's joint_names read from the joint state (the driver's units)."""
        return self.driver.joint_positions()[self._state_index]

    def dataset_state(self) -> np.ndarray:
        """The state in ALOHA's dataset space (joints in rad, grippers normalized)."""
        return self.driver.dataset_state()

    def labels(self) -> dict[str, str | None]:
        return {"language": scene_texts.phase(self.physics), "memory": scene_texts.memory_note(self.physics)}

    def question_due(self, chunk: int, asked: int) -> bool:
        """The first question with the frame of chunk 1 (the cube where it started); each later one with the next
        frame at which an arm holds the cube (so "the right arm" and "in the right gripper" are truths too)."""
        if asked == 0:
            return chunk == 1
        return chunk > 1 and scene_texts.holder(self.physics) is not None

    def draw_question(self, rng: np.random.Generator, split: str) -> tuple[str, str]:
        """One of ``scene_texts.QUESTIONS`` and its answer now (one phrasing each: ``split`` changes nothing)."""
        question = scene_texts.QUESTIONS[int(rng.integers(len(scene_texts.QUESTIONS)))]
        return question, scene_texts.answer(self.physics, question)

    # -------------------------------------------------------------------------------------- commands
    def deliver(self, trajectory: TimedTrajectory, at_s: float | None = None) -> None:
        """A trajectory over the action joints, times from the episode's start; received at the first step
        boundary at or after ``at_s`` (default: now)."""
        at = self.time_s if at_s is None else at_s
        self._pending.append((at, self._delivered, trajectory))
        self._delivered += 1
        self._pending.sort(key=lambda p: (p[0], p[1]))
        self._receive_due()

    def _receive_due(self) -> None:
        while self._pending and self._pending[0][0] <= self.time_s + 1e-9:
            self._receive(self._pending.pop(0)[2])

    def _receive(self, trajectory: TimedTrajectory) -> None:
        columns = _indices(list(trajectory.joint_names), self._action_joints, "the trajectory's joints")
        actions = trajectory.positions[:, columns]
        origin_ns = round(self._origin_step * DT * NS)
        start_ns = trajectory.start_time_ns + origin_ns if trajectory.start_time_ns else 0
        now_ns = self._measure()
        refusal = self.guard.check_chunk({spec.name: spec.values(actions) for spec in self.spec.wiring.outputs})
        if refusal is not None:
            self.hold("bad_output", str(refusal))
            return
        for spec in self.spec.wiring.outputs:
            timed = self.guard.trajectory(spec, TimedTrajectory(spec.joints, trajectory.times_s, spec.values(actions), start_ns), now_ns)
            if timed is not None:
                self._command(spec, timed)
        self.guard.state.resumed()

    def _measure(self) -> int:
        """The joint states now, for the guard; returns the driver's time (ns)."""
        now_ns = round(self.driver.step_count * DT * NS)
        self.guard.measured.put(self.driver.names, self.driver.joint_positions(), now_ns)
        return now_ns

    def _command(self, spec: OutputSpec, timed: TimedTrajectory) -> None:
        try:
            if spec.name in self._arms:
                self.driver.command_arm(self._arms[spec.name], timed)
            else:
                self._gripper_followers[self._grippers[spec.name]].command(timed, self.driver.step_count * DT)
        except TrajectoryRejected as exc:
            self.rejected.append(f"{spec.name}: {exc}")

    @property
    def holds_bad_chunks(self) -> bool:
        """Whether a chunk that is no command (NaN, far out of range) holds the outputs rather than failing the
        episode: the params file gives the guard limits, as the node's guard then holds."""
        return any(limits.any for limits in self.spec.wiring.limits.values())

    def hold(self, kind: str, reason: str) -> None:
        """Every output to its hold command now (as the node's guard does): the arms and grippers stay where their
        controllers were told they are; the next chunk blends from the measured state."""
        now_ns = self._measure()
        self.holds.append(f"{kind}: {reason}")
        self.guard.hold(kind, reason, now_ns)
        for spec in self.spec.wiring.outputs:
            held = hold_trajectory(spec, self.guard.hold_command(spec, now_ns), DT)
            if held is not None:
                self._command(spec, held)

    def advance(self, until_s: float) -> None:
        """Run 20 ms steps up to ``until_s`` (episode time), or to the episode's end."""
        while self.time_s < until_s - 1e-9 and not self.done:
            self._receive_due()
            end = (self.driver.step_count + 1) * DT  # a command belongs to the end of its step
            for arm, follower in enumerate(self._gripper_followers):
                self.driver.command_gripper(arm, [float(follower.setpoint(end)[0])])
            self.driver.step()
            self.arm_log.append(self.physics.arm_positions())
            if self.on_step is not None:
                self.on_step(self)
        self._receive_due()

    def close(self) -> None:
        """Free MuJoCo's data and rendering contexts (one scene per episode: hundreds of episodes would keep
        them all); the episode cannot step or render afterwards."""
        self.physics.physics.free()

    # --------------------------------------------------------------------------------------- metrics
    def jerk_rms(self) -> float:
        """RMS jerk of the 12 measured arm joints (rad/s^3) over the episode."""
        q = np.asarray(self.arm_log)
        if len(q) < 4:
            return 0.0
        return float(np.sqrt(np.mean((np.diff(q, n=3, axis=0) / DT**3) ** 2)))


def _indices(names: Sequence[str], wanted: Sequence[str], what: str) -> list[int]:
    index = {n: i for i, n in enumerate(names)}
    missing = [n for n in wanted if n not in index]
    if missing:
        raise WiringError(f"{what} {missing} are not among {list(names)}")
    return [index[n] for n in wanted]


def _controllers(driver: AlohaDriver, outputs: Sequence[OutputSpec]) -> tuple[Mapping[str, int], Mapping[str, int]]:
    """Output name → arm index (a joint_trajectory or Interbotix joint_group of one arm's six joints, positions)
    and → gripper index (a float64_array or Interbotix joint_single of one gripper joint); anything else does not
    fit the drivers. A streamed command (joint_group, joint_single, float64_array) is the row due at each step,
    which is the setpoint a trajectory of the same rows gives for the end of that step: both run as trajectories."""
    arms: dict[str, int] = {}
    grippers: dict[str, int] = {}
    gripper_names = _gripper_names(driver)
    for spec in outputs:
        if spec.type in ("joint_trajectory", "joint_group") and spec.interface == "position" and any(
            sorted(spec.joints) == sorted(names) for names in driver.arm_joint_names
        ):
            arms[spec.name] = next(i for i, names in enumerate(driver.arm_joint_names) if sorted(spec.joints) == sorted(names))
        elif spec.type in ("float64_array", "joint_single") and len(spec.joints) == 1 and spec.joints[0] in gripper_names:
            grippers[spec.name] = gripper_names.index(spec.joints[0])
        else:
            raise WiringError(f"output {spec.name} ({spec.type}, joints {list(spec.joints)}) fits none of the simulated "
                              f"controllers: a position joint trajectory or joint group of {list(driver.arm_joint_names[0])} (or "
                              f"the right arm's), or a float64_array or joint_single of one of {gripper_names}")  # fmt: skip
    if sorted(arms.values()) != [0, 1] or sorted(grippers.values()) != [0, 1]:
        raise WiringError(f"the outputs must command both arms and both grippers once each, got arms {arms}, grippers {grippers}")
    return arms, grippers


def _gripper_names(driver: AlohaDriver) -> list[str]:
    return [f"{prefix}gripper" for prefix in driver.prefixes]
