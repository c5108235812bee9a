"""Closed-loop evaluation in simulated time: the policy drives the simulated arm as `oxygen_node` would.

Per control tick at simulated time t: render both cameras and read the joints → `runtime.make_frame` →
`runtime.step` → actions → `trajectory_points` (the node's own builder) → delivered to the follower at
t + latency → `runtime.decode` between ticks (a fixed number of batched decode steps, so a run is
reproducible; deadline-driven decoding depends on the wall clock). Text events are matched with the
subtask and scene-memory labels of the frame they were forked from.

This is also the instrument for chunk timing: an injectable observation→action latency, trajectories
stamped "start on receipt" (as the node publishes them) or with the observation time, and per episode the
jump between the running and the new trajectory at every switch and the RMS jerk of the joints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from oxygen_ros.engine import ASK_TASK
from oxygen_ros.engine.types import FrameInput, TextEvent
from oxygen_ros.runtime import InputError, PolicyRuntime, RuntimeConfig, StepResult
from oxygen_ros.runtime.alignment import ChunkTooLate, aligned_trajectory, replan_due
from oxygen_ros.runtime.trajectory import JointLimits

from .dataset import CONTROL_PERIOD_S
from .episode import DEFAULT_TIME_LIMIT_S, EpisodeSpec, SimEpisode
from .questions import ANSWER_MAX_TOKENS, answer_kind
from .runner import HeldOutEpisodes
from .scene import JOINT_LOWER, JOINT_NAMES, JOINT_UPPER

DEFAULT_TOKENS_PER_FRAME = 4  # decode steps per tick when the configuration says "fill the slack" (0)
NS = 1_000_000_000


@dataclass(frozen=True)
class EvalSettings:
    control_period_s: float = CONTROL_PERIOD_S
    step_period_s: float = 0.0  # time between the actions of a chunk; 0 = one control period
    latency_s: float = 0.0  # observation taken at t, its trajectory reaches the robot at t + latency
    time_alignment: str = ""  # "stamp" | "drop" | "none" (runtime/alignment.py); "" = the runtime configuration's
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    blank_cameras: bool = False  # black images instead of the rendered ones (does the policy use vision?)
    questions: int = 0  # questions asked per episode through the runtime's ask path (questions.py), 0 = none
    question_split: str = "held_out"  # phrasings of the questions: "train" or "held_out"
    joint_names: tuple[str, ...] = JOINT_NAMES
    limits: JointLimits = JointLimits(tuple(JOINT_LOWER), tuple(JOINT_UPPER))
    guarded: bool = False  # the table-top arm's trajectories through the node's guard (its speeds and ranges)

    @property
    def action_period_s(self) -> float:
        return self.step_period_s or self.control_period_s


@dataclass
class TextRecord:
    task: str
    text: str
    label: str | None  # what the frame's true state says (None: the instruction names no object here)
    frame_seq: int

    @property
    def correct(self) -> bool:
        return self.label is not None and self.text.strip().lower() == self.label.lower()


@dataclass
class EpisodeResult:
    spec: EpisodeSpec
    success: bool
    time_to_success_s: float | None
    duration_s: float
    chunks: int
    skipped_ticks: int  # observations the runtime refused (InputError): no chunk, as in the node
    texts: list[TextRecord] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)  # every chunk, in robot units
    switch_jumps: list[float] = field(default_factory=list)  # rad, one per trajectory switch
    jerk_rms: float = 0.0
    rejected: list[str] = field(default_factory=list)
    place: str | None = None  # where the named object stood at the start ("far left"; None: not in the scene)
    absent: bool = False  # the instruction named an object the scene does not hold (success: nothing lifted)
    # Why it ended early as failed: {"reason": "physics_error" | "non_finite_action", "step", "joint", "message"}
    failure: dict | None = None

    def accuracy(self, task: str) -> tuple[int, int]:
        """(correct, counted) finished outputs of ``task`` whose frame had a label."""
        rows = [t for t in self.texts if t.task == task and t.label is not None]
        return sum(t.correct for t in rows), len(rows)


def eval_specs(seed: int, episodes: int) -> list[EpisodeSpec]:
    """Held-out episodes: seeds seed .. seed + episodes - 1, all below the training range."""
    return list(HeldOutEpisodes(seed, episodes))


class _TextCollector:
    """Joins each request's deltas; on its final delta, records the text against its frame's label."""

    def __init__(self, labels: dict[int, dict[str, str | None]]) -> None:
        self.labels = labels
        self.answers: dict[int, str] = {}  # request id of a question -> its true answer at the frame it was asked
        self.questions: dict[int, str] = {}  # request id of a question -> its text
        self.asked: dict[int, str] = {}  # index of an answer's record -> the question's text
        self.parts: dict[int, list[str]] = {}
        self.records: list[TextRecord] = []

    def add(self, events: list[TextEvent]) -> None:
        for ev in events:
            self.parts.setdefault(ev.request_id, []).append(ev.text)
            if ev.final:
                text = "".join(self.parts.pop(ev.request_id))
                if ev.finish_reason != "cancelled":
                    if ev.task == ASK_TASK:
                        label = self.answers.get(ev.request_id)
                        self.asked[len(self.records)] = self.questions.get(ev.request_id, "")
                    else:
                        label = self.labels.get(ev.frame_seq, {}).get(ev.task)
                    self.records.append(TextRecord(ev.task, text, label, ev.frame_seq))


def _cancel_text(runtime: PolicyRuntime, robot: str = "") -> None:
    """End every live text request of the robot (of every worker) so nothing carries over into the next episode."""
    runtime.engine.cancel_all(robot if len(runtime.robots) > 1 else None)
    text_engine = getattr(runtime.runner, "text_engine", None)
    if text_engine is not None:
        text_engine.cancel_all()


class EpisodeLoop:
    """One episode between the engine's ticks: ``observe`` runs the physics to the next tick that wants a
    chunk and returns its frame, ``act`` delivers the chunk. Several loops, one per robot of the runtime,
    can share the ticks of one engine (``evaluate_batched``).

    The episode comes from ``spec.make_episode(control_period_s, time_limit_s)``: the table-top `SimEpisode`
    or the MuJoCo ALOHA's (`aloha/episode.py`). It advances its physics (``advance``), shows ``images(size)``
    and ``state``, takes timed trajectories (``deliver``), says its texts' truth (``labels()``: the
    narration and memory labels of the frame; ``draw_question(rng, split)``: a question and its answer now;
    ``question_due(chunk, asked)``: whether the next question goes with the frame of that chunk),
    and reports ``done``, ``succeeded``, ``success_time_s``, ``time_s``, ``location``, ``absent``,
    ``switches``, ``rejected``, ``failure`` (why it ended early as failed, e.g. MuJoCo's physics error; None)
    and ``jerk_rms()``; ``close()`` frees what it holds once the result is taken.

    A chunk with non-finite actions is not delivered (the node sends no command for it). Where the episode's
    guard has limits (``holds_bad_chunks``: the ALOHA's params file with limits) its outputs hold, as the node's
    do, and the episode goes on; else it ends as failed (``non_finite_action``, the tick and the first joint
    affected) and the next episode runs."""

    def __init__(self, runtime: PolicyRuntime, spec: Any, settings: EvalSettings, robot: str = "") -> None:
        if runtime.config.engine_mode == "oxygen" and runtime.config.tokens_per_frame < 1:
            raise ValueError("closed-loop evaluation needs tokens_per_frame >= 1 (deadline-driven decoding is not reproducible)")
        self.runtime, self.spec, self.settings, self.robot = runtime, spec, settings, robot
        runtime.start_episode(spec.seed, robot)  # the noise is the episode's: its outcome is its own
        self.episode = spec.make_episode(settings.control_period_s, settings.time_limit_s)
        if settings.guarded and hasattr(self.episode, "use_guard"):  # the table-top arm (the ALOHA's file has its own)
            self.episode.use_guard()
        self.labels: dict[int, dict[str, str | None]] = {}
        self.text = _TextCollector(self.labels)
        self.result = EpisodeResult(spec, False, None, 0.0, 0, 0, place=self.episode.location,
                                    absent=self.episode.absent)
        self._asked = 0  # questions asked so far (the episode says when each is due: ``question_due``)
        self._question_rng = np.random.default_rng([spec.seed, 29])
        self.tick = 0  # control ticks since the episode started
        self._last_chunk_s: float | None = None
        self._stamp_ns = 0

    def observe(self) -> FrameInput | None:
        """Advance to the next tick that wants a chunk (``self.tick``) and return its frame; None once done."""
        runtime, settings, episode = self.runtime, self.settings, self.episode
        while True:
            if self.result.failure is not None:
                return None
            t = self.tick * settings.control_period_s
            episode.advance(t)
            if episode.done:
                return None
            if not replan_due(t, self._last_chunk_s, runtime.config.replan, runtime.n_action_steps,
                              settings.action_period_s, slack_s=settings.control_period_s / 2):  # fmt: skip
                self.tick += 1
                continue
            images = episode.images(runtime.image_size)
            if settings.blank_cameras:
                images = tuple(np.zeros_like(im) for im in images)
            seq = runtime.engine.robot(self.robot).ticks
            self.labels[seq] = episode.labels()
            self._stamp_ns = int(round(t * NS))
            try:
                frame = runtime.make_frame(images, episode.state, self.spec.instruction, self._stamp_ns, frame_seq=seq)
            except InputError:
                self.result.skipped_ticks += 1
                self.tick += 1
                continue
            if self._asked < settings.questions and episode.question_due(self.result.chunks, self._asked):
                self._asked += 1
                question, truth = episode.draw_question(self._question_rng, settings.question_split)
                request = runtime.ask(runtime.question_tokens(question), ANSWER_MAX_TOKENS, self.robot)
                self.text.answers[request], self.text.questions[request] = truth, question
            return frame

    def act(self, step: StepResult) -> None:
        """Deliver the chunk of the frame ``observe`` returned, as the node would; the tick is done."""
        settings, runtime = self.settings, self.runtime
        t = self.tick * settings.control_period_s
        self._last_chunk_s = t
        self.text.add(step.events)
        if not np.all(np.isfinite(step.actions)):  # the node sends nothing for it
            runtime.forget_chunk(self.robot)
            if getattr(self.episode, "holds_bad_chunks", False):  # its guard holds the arms, as the node's: go on
                self.episode.hold("bad_output", "the model's actions contain NaN or infinite values")
            else:  # nothing between the model and the arm: the episode fails here
                self.result.failure = non_finite_failure(step.actions, settings.joint_names, self.tick)
            self.result.chunks += 1
            self.tick += 1
            return
        try:
            trajectory, _ = aligned_trajectory(
                step.actions, settings.joint_names, settings.action_period_s, settings.limits, self._stamp_ns,
                settings.latency_s, runtime.n_action_steps, settings.time_alignment or runtime.config.time_alignment,
            )  # fmt: skip
            self.episode.deliver(trajectory, at_s=t + settings.latency_s)
        except ChunkTooLate as exc:  # as the node: nothing sent, the next chunk does not continue this one
            self.result.rejected.append(str(exc))
            runtime.forget_chunk(self.robot)
        except ValueError as exc:  # no command at all (NaN actions): a robot with a guard holds, as the node's
            hold = getattr(self.episode, "hold", None)
            if hold is None:
                raise
            hold("bad_output", str(exc))
            runtime.forget_chunk(self.robot)
        self.result.chunks += 1
        self.result.actions.append(step.actions.copy())
        self.tick += 1

    def finish(self) -> EpisodeResult:
        _cancel_text(self.runtime, self.robot)
        result, episode = self.result, self.episode
        result.success = episode.succeeded
        result.time_to_success_s = episode.success_time_s
        result.duration_s = episode.time_s
        result.texts = self.text.records
        result.switch_jumps = [s.jump for s in episode.switches]
        result.jerk_rms = episode.jerk_rms()
        result.rejected = episode.rejected
        result.failure = result.failure or episode.failure
        episode.close()
        return result


def non_finite_failure(actions: np.ndarray, joint_names: tuple[str, ...], tick: int) -> dict:
    """The failure record of a chunk with NaN or infinite actions: the tick and the first joint affected."""
    values = np.asarray(actions, dtype=np.float64)
    bad = np.flatnonzero(~np.all(np.isfinite(values), axis=0))
    column = int(bad[0]) if bad.size else 0
    joint = joint_names[column] if column < len(joint_names) else f"action dim {column}"
    return {"reason": "non_finite_action", "step": tick, "joint": joint,
            "message": f"{int(np.sum(~np.isfinite(values)))} NaN or infinite values in the chunk"}


def failure_counts(failures: list[dict | None]) -> dict[str, int]:
    """Episodes that ended early as failed, per reason (``physics_error``, ``non_finite_action``)."""
    counts: dict[str, int] = {}
    for failure in failures:
        if failure is not None:
            counts[failure["reason"]] = counts.get(failure["reason"], 0) + 1
    return dict(sorted(counts.items()))


def run_episode(
    runtime: PolicyRuntime,
    spec: EpisodeSpec,
    settings: EvalSettings = EvalSettings(),
    on_tick: Callable[[SimEpisode, Any], None] | None = None,
) -> EpisodeResult:
    """One episode in simulated time; deterministic for the spec (the action noise is seeded by it)."""
    return drive(EpisodeLoop(runtime, spec, settings), on_tick)


def drive(loop: EpisodeLoop, on_tick: Callable[[Any, Any], None] | None = None) -> EpisodeResult:
    """Run a loop's episode to its end: a chunk per due tick, then the decode steps of the text."""
    runtime, settings = loop.runtime, loop.settings
    while (frame := loop.observe()) is not None:
        step = runtime.step(frame, settings.action_period_s, settings.latency_s)
        loop.act(step)
        loop.text.add(runtime.decode())
        if on_tick is not None:
            on_tick(loop.episode, step)
    return loop.finish()


def evaluate(
    runtime: PolicyRuntime, specs: list[EpisodeSpec], settings: EvalSettings = EvalSettings(), envs: int = 1,
    exact: bool = True,
) -> Iterator[EpisodeResult]:
    """Episode results as they finish (for a progress bar); `summarize` turns them into the report. With
    ``envs`` > 1, that many episodes run at once through the runtime's one engine (``evaluate_batched``)."""
    with torch.inference_mode():
        if envs > 1:
            yield from evaluate_batched(runtime, specs, settings, envs, exact)
            return
        for spec in specs:
            yield run_episode(runtime, spec, settings)


def env_robot(index: int) -> str:
    """The runtime robot that simulated environment ``index`` drives (the first is the runtime's own)."""
    return "" if index == 0 else f"env{index}"


def evaluate_batched(
    runtime: PolicyRuntime, specs: list[EpisodeSpec], settings: EvalSettings, envs: int, exact: bool = True
) -> Iterator[EpisodeResult]:
    """Up to ``envs`` episodes at once, each environment one robot of the runtime: every tick, the frames of
    the environments due are served by one engine tick (their chunks in one batched call), then the decode
    steps advance every environment's text together. An environment whose episode ends starts the next spec.
    ``exact`` (``Engine.tick_many``): each episode's chunks are bit for bit those of ``run_episode`` (same
    frames, same seeded noise), so every episode takes the same path and ends the same way; otherwise all due
    chunks share one call and agree up to float rounding, which a closed loop can amplify (a joint state
    digitized into the prompt lands in the next bin).
    """
    if runtime.config.engine_mode not in ("oxygen", "action_only"):
        raise ValueError(f"--envs needs engine_mode oxygen or action_only, not {runtime.config.engine_mode!r}")
    for i in range(envs):
        if env_robot(i) not in runtime.robots:
            runtime.add_robot(env_robot(i))
    queue = list(specs)
    loops: dict[str, tuple[EpisodeLoop, int]] = {}  # robot → (its episode, the global tick its clock started at)
    pending: dict[str, int] = {}  # robot → the global tick of its next frame
    frames: dict[str, FrameInput] = {}

    def start(robot: str, at: int) -> None:
        while queue:
            loop = EpisodeLoop(runtime, queue.pop(0), settings, robot)
            frame = loop.observe()
            loops[robot] = (loop, at)
            if frame is not None:
                frames[robot], pending[robot] = frame, at + loop.tick
                return
            finished.append(loop.finish())  # over before its first chunk
        loops.pop(robot, None)

    finished: list[EpisodeResult] = []
    for i in range(min(envs, len(specs))):
        start(env_robot(i), 0)
    while pending:
        now = min(pending.values())
        due = [r for r, g in pending.items() if g == now]
        steps = runtime.step_many({r: frames.pop(r) for r in due}, settings.action_period_s, settings.latency_s, exact)
        for robot in due:
            del pending[robot]
            loops[robot][0].act(steps[robot])
        events = runtime.decode()
        for robot, (loop, _) in loops.items():
            loop.text.add([e for e in events if e.robot == robot])
        for robot in due:
            loop, at = loops[robot]
            frame = loop.observe()
            if frame is not None:
                frames[robot], pending[robot] = frame, at + loop.tick
                continue
            finished.append(loop.finish())
            start(robot, at + loop.tick)
        yield from finished
        finished.clear()
    yield from finished


def _ratio(pairs: list[tuple[int, int]]) -> float | None:
    correct, counted = (sum(p[i] for p in pairs) for i in (0, 1))
    return correct / counted if counted else None


def _successes_by(results: list[EpisodeResult], key: Callable[[EpisodeResult], str | None]) -> dict[str, list[int]]:
    """{key: [successes, episodes]}, keys sorted ("none": the instruction names no object we know)."""
    counts: dict[str, list[int]] = {}
    for r in results:
        row = counts.setdefault(key(r) or "none", [0, 0])
        row[0] += r.success
        row[1] += 1
    return dict(sorted(counts.items()))


def answers_by_kind(results: list[EpisodeResult], kind: Callable[[str], str] = answer_kind) -> dict[str, list[int]]:
    """[correct, asked] per kind of true answer (``kind`` of the answer's text)."""
    counts: dict[str, list[int]] = {}
    for t in (t for r in results for t in r.texts if t.task == ASK_TASK and t.label is not None):
        row = counts.setdefault(kind(t.label), [0, 0])
        row[0] += t.correct
        row[1] += 1
    return dict(sorted(counts.items()))


def _family_rows(results: list[EpisodeResult]) -> dict[str, dict[str, Any]]:
    """Per family: success [successes, episodes] beside the text accuracies (narration alone hides failure)."""
    rows: dict[str, dict[str, Any]] = {}
    for family in dict.fromkeys(r.spec.family for r in results):
        mine = [r for r in results if r.spec.family == family]
        rows[family] = {
            "success": [sum(r.success for r in mine), len(mine)],
            "success_rate": round(sum(r.success for r in mine) / len(mine), 4),
            **{f"{name}_accuracy": _rounded(_ratio([r.accuracy(task) for r in mine])) for name, task in _TEXT_METRICS},
        }
    return rows


_TEXT_METRICS = (("narration", "language"), ("memory", "memory"), ("answer", ASK_TASK))


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def summarize(results: list[EpisodeResult], runtime: PolicyRuntime | RuntimeConfig, settings: EvalSettings) -> dict[str, Any]:
    """The report: success (an absent named object: nothing lifted) beside the text accuracies, per family.
    ``runtime``: the runtime that ran them, or its configuration (results that came from other processes)."""
    config = runtime if isinstance(runtime, RuntimeConfig) else runtime.config
    times = [r.time_to_success_s for r in results if r.success and r.time_to_success_s is not None]
    jumps = [j for r in results for j in r.switch_jumps]
    present = [r for r in results if not r.absent and r.spec.target_name is not None]
    absent = [r for r in results if r.absent]
    return {
        "success_rate": sum(r.success for r in results) / len(results) if results else 0.0,
        "mean_time_to_success_s": float(np.mean(times)) if times else None,
        "narration_accuracy": _ratio([r.accuracy("language") for r in results]),
        "memory_accuracy": _ratio([r.accuracy("memory") for r in results]),
        "answer_accuracy": _ratio([r.accuracy(ASK_TASK) for r in results]) if settings.questions else None,
        # per kind of true answer: [correct, asked] (a policy that learned only the commonest answer shows here)
        **({"answers_by_kind": answers_by_kind(results)} if settings.questions else {}),
        "success_by_family": _family_rows(results),
        # absent named objects: success means nothing was lifted (and the narration should say it is not here)
        "absent": {"episodes": len(absent), "nothing_lifted": sum(r.success for r in absent)},
        "chunks": sum(r.chunks for r in results),
        "episodes": len(results),
        "engine_mode": config.engine_mode,
        "tokens_per_frame": config.tokens_per_frame,
        "latency_s": settings.latency_s,
        "blank_cameras": settings.blank_cameras,
        "mean_switch_jump_rad": float(np.mean(jumps)) if jumps else None,
        "max_switch_jump_rad": float(np.max(jumps)) if jumps else None,
        "mean_jerk_rms_rad_s3": float(np.mean([r.jerk_rms for r in results])) if results else None,  # rad/s³
        "skipped_ticks": sum(r.skipped_ticks for r in results),
        # episodes ended early as failed, per reason: a physics error (MuJoCo), a chunk of NaN/inf actions
        "failures": failure_counts([r.failure for r in results]),
        "text_outputs": {task: sum(r.accuracy(task)[1] for r in results) for task in ("language", "memory", ASK_TASK)},
        # Where a policy fails: per named object and per place of it at the start, over the scenes that hold it.
        "success_by_target": _successes_by(present, lambda r: r.spec.target_name),
        "success_by_place": _successes_by(present, lambda r: r.place),
    }


def deterministic_config(config: Any, tokens_per_frame: int | None = None, engine_mode: str | None = None) -> Any:
    """The runtime configuration for a reproducible evaluation (fixed decode steps per tick)."""
    changes: dict[str, Any] = {}
    if engine_mode:
        changes["engine_mode"] = engine_mode
    if tokens_per_frame is not None:
        changes["tokens_per_frame"] = tokens_per_frame
    elif config.tokens_per_frame == 0:
        changes["tokens_per_frame"] = DEFAULT_TOKENS_PER_FRAME
    return dataclasses.replace(config, **changes)
