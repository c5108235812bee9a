"""One simulated episode in simulated time: scene + trajectory follower + the task's success test.

Whatever drives the robot (the scripted expert, the policy in `evaluate.py`, the ROS node) hands timed
trajectories to `deliver` (to be received at a given simulated instant) and calls `advance`; the physics
runs in SUBSTEP_S steps: the follower moves the joints, the scene runs the grasp physics, success is
checked. No ROS here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from oxygen_ros.runtime.outputs import OutputSpec
from oxygen_ros.runtime.safety import DEFAULT_BLEND_S, OutputLimits, SafetyGuard, hold_trajectory
from oxygen_ros.runtime.trajectory import TimedTrajectory

from .expert import SUBSTEP_S, instruction_for, location_text, memory_text, subtask_text
from .phrasing import FAMILIES, phrase, target_in
from .questions import answer, draw_question
from .follower import TrajectoryFollower, TrajectoryRejected
from .render import render_views
from .variation import DISTRACTORS, Lighting, absent_name, add_distractor
from .scene import ARM_JOINTS, JOINT_LOWER, JOINT_NAMES, JOINT_UPPER, MAX_VELOCITY, Scene

# The table-top arm's one output, as a node's joint_trajectory output of its joints would be.
ARM_OUTPUT = OutputSpec("arm", "joint_trajectory", "joint_trajectory_controller/joint_trajectory",
                        tuple(range(len(JOINT_NAMES))), JOINT_NAMES)

DEFAULT_TIME_LIMIT_S = 12.0
TRAIN_SEED_BASE = 1_000_000  # training episodes use seeds >= this ...
EVAL_SEED_LIMIT = TRAIN_SEED_BASE  # ... held-out evaluation seeds are in [0, EVAL_SEED_LIMIT)


SCENE_FAMILIES = ("lighting", *DISTRACTORS, "absent")
EVAL_FAMILIES = (*FAMILIES, *SCENE_FAMILIES)  # what `oxygen-sim eval --family` accepts


@dataclass(frozen=True)
class EpisodeSpec:
    """What an episode is: the scene's seed and the instruction (naming an object, present or not), and what a
    user may vary: the family the episode belongs to, a distractor, the lighting, the number of objects."""

    seed: int
    instruction: str
    target_name: str | None  # the object the instruction names; None when it names none we know
    family: str = "plain"
    distractor: str = ""  # "", "same_colour" or "same_kind" (variation.add_distractor)
    lighting: Lighting = Lighting()
    num_objects: int | None = None  # None: drawn by the seed

    @classmethod
    def from_seed(cls, seed: int, num_objects: int | None = None) -> "EpisodeSpec":
        """A scene from ``seed`` and an instruction naming one of its objects, both drawn from the seed."""
        scene = Scene.random(seed, num_objects)
        rng = np.random.default_rng([seed, 7])
        target = scene.objects[int(rng.integers(len(scene.objects)))].name
        return cls(seed, instruction_for(target, int(rng.integers(3))), target, num_objects=num_objects)

    @classmethod
    def with_instruction(cls, seed: int, instruction: str, num_objects: int | None = None) -> "EpisodeSpec":
        """The scene of ``seed`` with any instruction text; its target is the first object it names (any case
        or punctuation, kind synonyms read as their kind), which may be absent from the scene."""
        return cls(seed, instruction, target_in(instruction), family="instruction", num_objects=num_objects)

    @classmethod
    def for_family(cls, seed: int, family: str, split: str = "held_out", num_objects: int | None = None) -> "EpisodeSpec":
        """The episode of ``seed`` varied as ``family`` says (an instruction family of `phrasing.py` or one of
        SCENE_FAMILIES), words from ``split``; "plain" is ``from_seed`` itself."""
        base = cls.from_seed(seed, num_objects)
        rng = np.random.default_rng([seed, 23])
        if family == "plain":
            return base
        if family in FAMILIES:
            return replace(base, instruction=phrase(base.target_name, family, rng, split), family=family)
        if family == "lighting":
            return replace(base, lighting=Lighting.random(rng), family=family)
        if family in DISTRACTORS:
            return replace(base, distractor=family, family=family)
        if family == "absent":
            name = absent_name(base.scene(), rng)
            return replace(base, instruction=instruction_for(name, int(rng.integers(3))), target_name=name, family=family)
        raise ValueError(f"unknown family {family!r}; choose from {', '.join(EVAL_FAMILIES)}")

    @classmethod
    def with_template(cls, seed: int, template: str, num_objects: int | None = None) -> "EpisodeSpec":
        """The episode of ``seed`` with its named object put into ``template`` ("{}" marks where)."""
        base = cls.from_seed(seed, num_objects)
        return replace(base, instruction=template.replace("{}", base.target_name or ""), family="template")

    def make_episode(self, control_period_s: float, time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> "SimEpisode":
        """The episode in simulated time (what `evaluate.EpisodeLoop` runs)."""
        return SimEpisode(self, control_period_s, time_limit_s)

    def scene(self) -> Scene:
        """The episode's scene: the seed's, with the distractor if it has one."""
        scene = Scene.random(self.seed, self.num_objects)
        if self.distractor and self.target_name:
            add_distractor(scene, self.target_name, self.distractor, np.random.default_rng([self.seed, 17]))
        return scene


@dataclass
class SwitchRecord:
    """A trajectory taking over: when, and how far the new setpoint is from the old one a period later."""

    time_s: float
    jump: float  # max |new - old| over the arm joints (rad) at time_s + period


@dataclass
class SimEpisode:
    spec: EpisodeSpec
    control_period_s: float = 0.2
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    stop_on_success: bool = True
    scene: Scene = field(init=False)
    follower: TrajectoryFollower = field(init=False)
    target: int | None = field(init=False)
    time_s: float = 0.0
    success_time_s: float | None = None
    lifted_any_s: float | None = None  # when any object was first lifted (the wrong one, or one where none was named)
    failure: dict | None = None  # the kinematic scene has no physics error: never set
    rejected: list[str] = field(default_factory=list)
    switches: list[SwitchRecord] = field(default_factory=list)
    joint_log: list[np.ndarray] = field(default_factory=list)  # measured joints after every physics step
    guard: SafetyGuard | None = None  # the node's guard between the trajectories and the follower (`use_guard`)
    holds: list[str] = field(default_factory=list)
    _pending: list[tuple[float, int, TimedTrajectory]] = field(default_factory=list)
    _steps: int = 0  # physics steps so far (time_s = _steps * SUBSTEP_S, no drift)

    def __post_init__(self) -> None:
        self.scene = self.spec.scene()
        self.target = self.scene.find(self.spec.target_name) if self.spec.target_name else None
        self.follower = TrajectoryFollower(JOINT_NAMES, self.scene.q, MAX_VELOCITY, JOINT_LOWER, JOINT_UPPER)
        self.joint_log.append(self.scene.q.copy())

    # ---------------------------------------------------------------------------------- observation
    def images(self, size: int) -> tuple[np.ndarray, ...]:
        """Both camera images under the episode's lighting."""
        return self.spec.lighting.apply(render_views(self.scene, size))

    @property
    def state(self) -> np.ndarray:
        return self.scene.q.astype(np.float32)

    @property
    def absent(self) -> bool:
        """The instruction names an object this scene does not hold."""
        return self.target is None and self.spec.target_name is not None

    @property
    def subtask(self) -> str | None:
        return subtask_text(self.scene, self.target, self.spec.target_name)

    @property
    def memory(self) -> str | None:
        return memory_text(self.scene, self.target, self.spec.target_name)

    def labels(self) -> dict[str, str | None]:
        """What the scene's truth says now, per text task: the subtask, the scene note, the object's place."""
        return {"language": self.subtask, "memory": self.memory, "location": self.location}

    @staticmethod
    def question_due(chunk: int, asked: int) -> bool:
        """Questions go with the frames of chunks 1, 4, 7, ... (one each)."""
        return chunk == 1 + 3 * asked

    def draw_question(self, rng: np.random.Generator, split: str) -> tuple[str, str]:
        """A question about the scene (``questions.draw_question``, phrased from ``split``) and its answer now."""
        question = draw_question(self.scene, rng, split)
        return question.text, answer(self.scene, question)

    @property
    def succeeded(self) -> bool:
        """The named object lifted; where it is absent, nothing lifted (judged at the end of the episode)."""
        if self.absent:
            return self.lifted_any_s is None and self.done
        return self.success_time_s is not None

    @property
    def location(self) -> str | None:
        return location_text(self.scene, self.target)

    @property
    def done(self) -> bool:
        succeeded = self.stop_on_success and (self.success_time_s is not None or (self.absent and self.lifted_any_s is not None))
        return succeeded or self.time_s >= self.time_limit_s - 1e-9

    # ----------------------------------------------------------------------------------- commands
    def deliver(self, trajectory: TimedTrajectory, at_s: float | None = None) -> None:
        """The trajectory reaches the follower at ``at_s`` (default: now), exactly, even between physics steps."""
        at = self.time_s if at_s is None else max(at_s, self.time_s)
        self._pending.append((at, len(self._pending), trajectory))
        self._pending.sort(key=lambda p: (p[0], p[1]))
        self._receive_due(self.time_s)

    def use_guard(self, blend_s: float = DEFAULT_BLEND_S) -> None:
        """Trajectories through the node's guard (oxygen_ros/runtime/safety) with the arm's own limits: the
        follower's joint speeds and ranges."""
        limits = OutputLimits(ARM_OUTPUT.name, JOINT_NAMES, tuple(MAX_VELOCITY), (math.inf,) * len(JOINT_NAMES),
                              tuple(JOINT_LOWER), tuple(JOINT_UPPER))  # fmt: skip
        self.guard = SafetyGuard([ARM_OUTPUT], {ARM_OUTPUT.name: limits}, self.control_period_s, blend_s)

    def _guarded(self, trajectory: TimedTrajectory, at: float) -> TimedTrajectory | None:
        """The trajectory as the guard lets it through at ``at`` (None: nothing to command; a hold is sent)."""
        guard = self.guard
        if guard is None:
            return trajectory
        now_ns = round(at * 1e9)
        guard.measured.put(JOINT_NAMES, self.scene.q, now_ns)
        refusal = guard.check_chunk({ARM_OUTPUT.name: trajectory.positions})
        if refusal is not None:
            self.holds.append(str(refusal))
            guard.hold("bad_output", str(refusal), now_ns)
            return hold_trajectory(ARM_OUTPUT, guard.hold_command(ARM_OUTPUT, now_ns), self.control_period_s)
        guarded = guard.trajectory(ARM_OUTPUT, trajectory, now_ns)
        guard.state.resumed()
        return guarded

    def _receive_due(self, up_to_s: float) -> None:
        while self._pending and self._pending[0][0] <= up_to_s + 1e-9:
            at, _, trajectory = self._pending.pop(0)
            trajectory = self._guarded(trajectory, at)
            if trajectory is None:
                continue
            probe = at + self.control_period_s
            before = self.follower.setpoint(probe) if self.follower.end_time_s is not None else None
            try:
                self.follower.command(trajectory, at)
            except TrajectoryRejected as exc:
                self.rejected.append(str(exc))
                continue
            if before is not None:
                jump = float(np.max(np.abs(self.follower.setpoint(probe)[:3] - before[:3])))
                self.switches.append(SwitchRecord(at, jump))

    def advance(self, until_s: float) -> None:
        """Run the physics in SUBSTEP_S steps up to ``until_s`` (or success, or the time limit)."""
        while self.time_s < until_s - 1e-9 and not self.done:
            end = (self._steps + 1) * SUBSTEP_S
            self._receive_due(end - 1e-9)  # trajectories arriving inside this step, at their own instants
            self._steps += 1
            self.time_s = end
            self.scene.apply(self.follower.update(end))
            self.follower.block(self.scene.q, ARM_JOINTS)  # the table may have stopped the arm
            self.joint_log.append(self.scene.q.copy())
            if self.success_time_s is None and self.target is not None and self.scene.lifted(self.target):
                self.success_time_s = self.time_s
            if self.lifted_any_s is None and self.scene.lifted(self.scene.held):
                self.lifted_any_s = self.time_s
        self._receive_due(self.time_s)

    def close(self) -> None:
        """Nothing to free (the scene is plain Python)."""

    # -------------------------------------------------------------------------------------- metrics
    def jerk_rms(self) -> float:
        """RMS jerk of the measured arm joints (rad/s^3) over the episode, from the physics steps."""
        q = np.asarray(self.joint_log)[:, :3]
        if len(q) < 4:
            return 0.0
        jerk = np.diff(q, n=3, axis=0) / SUBSTEP_S**3
        return float(np.sqrt(np.mean(jerk**2)))
