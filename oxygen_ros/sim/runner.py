"""Episodes one after another on a live clock: what `oxygen_sim_node` runs, without its ROS plumbing.

Each episode starts with a new scene and instruction, then waits ``settle_s`` (trajectories still in flight
for the previous scene are dropped, and the policy sees the new instruction) before its physics clock
starts. It ends on success or at its time limit, with an outcome event; the next one starts at once.
Trajectory stamps are node-clock times and are converted to the episode's clock (0 stays "on receipt").

Nothing grows with the number of episodes: `HeldOutEpisodes` makes each episode's spec when it starts, and the
runner keeps counts of the outcomes, not the outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from oxygen_ros.runtime.trajectory import TimedTrajectory

from .episode import DEFAULT_TIME_LIMIT_S, EVAL_SEED_LIMIT, EpisodeSpec, SimEpisode
from .follower import TrajectoryRejected

NS = 1_000_000_000


@dataclass(frozen=True)
class EpisodeEvent:
    kind: str  # "start" or "end"
    index: int
    spec: EpisodeSpec
    success: bool = False
    time_to_success_s: float | None = None
    duration_s: float = 0.0
    clock_start_s: float = 0.0  # when the episode's physics clock is 0, on the runner's clock

    def as_dict(self) -> dict:
        return {"event": self.kind, "index": self.index, "seed": self.spec.seed, "instruction": self.spec.instruction,
                "target": self.spec.target_name, "success": self.success, "time_to_success_s": self.time_to_success_s,
                "duration_s": round(self.duration_s, 3), "clock_start_ns": round(self.clock_start_s * NS)}  # fmt: skip


class HeldOutEpisodes(Sequence[EpisodeSpec]):
    """Episodes of seeds ``seed`` .. ``seed + count - 1`` (held out: below the training range), phrased as
    ``family`` says, or with ``instructions[i % len]`` where that is not empty; each spec is made when asked for."""

    def __init__(self, seed: int, count: int, family: str = "plain", instructions: Sequence[str] = ()) -> None:
        if seed < 0 or count < 0 or seed + count > EVAL_SEED_LIMIT:
            raise ValueError(f"evaluation seeds must lie in [0, {EVAL_SEED_LIMIT}) (training uses the seeds above)")
        self.seed, self.count, self.family, self.instructions = seed, count, family, tuple(instructions)
        if count:
            self[0]  # noqa: B018 - an unknown family is refused now, not at the first episode

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> EpisodeSpec:  # type: ignore[override]
        if not -self.count <= index < self.count:
            raise IndexError(f"episode {index} of {self.count}")
        index %= self.count
        text = self.instructions[index % len(self.instructions)] if self.instructions else ""
        if text:
            return EpisodeSpec.with_instruction(self.seed + index, text)
        return EpisodeSpec.for_family(self.seed + index, self.family)


class EpisodeRunner:
    def __init__(self, specs: Sequence[EpisodeSpec], control_period_s: float, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                 settle_s: float = 1.0) -> None:  # fmt: skip
        if not specs:
            raise ValueError("no episodes to run")
        self.specs = specs
        self.control_period_s = control_period_s
        self.time_limit_s = time_limit_s
        self.settle_s = settle_s
        self.index = -1
        self.episode: SimEpisode | None = None
        self._start_s = 0.0  # node-clock time at which the current episode's physics clock is 0
        self.ended = 0  # episodes that ended
        self.succeeded = 0  # ... with success
        self.dropped = 0  # trajectories that arrived while settling or after the last episode

    @property
    def finished(self) -> bool:
        return self.index >= len(self.specs)

    def episode_time(self, now_s: float) -> float:
        return now_s - self._start_s

    def _begin(self, now_s: float) -> list[EpisodeEvent]:
        self.index += 1
        if self.finished:
            self.episode = None
            return []
        spec = self.specs[self.index]
        self.episode = SimEpisode(spec, self.control_period_s, self.time_limit_s)
        self._start_s = now_s + self.settle_s
        return [EpisodeEvent("start", self.index, spec, clock_start_s=self._start_s)]

    def hold(self, now_s: float) -> EpisodeEvent | None:
        """Keep the current episode settling (its clock not started) for another ``settle_s`` from now;
        returns its start event with the new clock start."""
        if self.episode is None or self.episode_time(now_s) >= 0:
            return None
        self._start_s = now_s + self.settle_s
        return EpisodeEvent("start", self.index, self.episode.spec, clock_start_s=self._start_s)

    def update(self, now_s: float) -> list[EpisodeEvent]:
        """Run the physics up to ``now_s`` (node clock, seconds); returns episode starts and ends."""
        if self.index < 0:
            return self._begin(now_s)
        ep = self.episode
        if ep is None:
            return []
        t = self.episode_time(now_s)
        if t > 0:
            ep.advance(t)
        if not ep.done:
            return []
        end = EpisodeEvent("end", self.index, ep.spec, ep.success_time_s is not None, ep.success_time_s, ep.time_s, self._start_s)
        self.ended += 1
        self.succeeded += end.success
        return [end, *self._begin(now_s)]

    def _running_episode(self, now_s: float) -> SimEpisode | None:
        """The episode advanced to ``now_s``, or None (settling or finished: the command is dropped)."""
        ep = self.episode
        t = self.episode_time(now_s)
        if ep is None or t < 0:
            self.dropped += 1
            return None
        ep.advance(t)
        return ep

    def receive_velocity(self, joint_names: tuple[str, ...], velocities: list[float], now_s: float) -> None:
        """A velocity forward_command_controller's command arrived at ``now_s``; refused ones are counted in
        the episode (``rejected``)."""
        ep = self._running_episode(now_s)
        if ep is None:
            return
        try:
            ep.follower.command_velocity(joint_names, velocities, ep.time_s)
        except TrajectoryRejected as exc:
            ep.rejected.append(str(exc))

    def receive(self, trajectory: TimedTrajectory, now_s: float) -> None:
        """A trajectory arrived at ``now_s``; rejected ones are counted in the episode (``rejected``)."""
        ep = self._running_episode(now_s)
        if ep is None:
            return
        if trajectory.start_time_ns:  # node-clock stamp → the episode's clock (a stamp before it: 1 ns, long past)
            trajectory = replace(trajectory, start_time_ns=max(1, trajectory.start_time_ns - round(self._start_s * NS)))
        ep.deliver(trajectory)
