"""The guard between the policy's commands (after the output conversions, in the robot's units) and the
controllers: the node (`oxygen_ros.ros.controller_outputs`), the bag tools and the simulators all send
through it.

`SafetyGuard` (one per robot) keeps one `OutputGuard` per output, the hold state and the limit counts:

* ``check_chunk`` — a chunk that is no command at all (non-finite, or far beyond a position range): hold; the
  refusal counted by output, joint and reason (``refusals``).
* ``trajectory`` / ``stream`` — a command held to the limits (`retime`), from the measured state.
* ``hold`` — every output to its hold command (`hold_command`): a trajectory to the measured position, zero
  velocity, a zero twist; the next command blends from the measured state over ``blend_s``.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from ..outputs import OutputSpec
from ..trajectory import TimedTrajectory
from .hold import HoldState, LimitCounter, MeasuredJoints
from .limits import OutputLimits
from .refusals import Refusal, RefusalCounter
from .retime import (Hits, blend_weights, count_clamps, empty_hits, far_clamps, guard_positions, guard_twist,
                     guard_velocities)
from .scaling import scale_step

__all__ = ["OutputGuard", "SafetyGuard", "hold_trajectory"]

NS = 1_000_000_000
DEFAULT_BLEND_S = 0.5
MIN_LEAD_STEPS = 0.25  # a guarded trajectory's first point lies at least this many step periods ahead


class OutputGuard:
    """One output's commands held to its limits, with what it last commanded."""

    def __init__(self, spec: OutputSpec, limits: OutputLimits, step_period_s: float, blend_s: float = DEFAULT_BLEND_S) -> None:
        self.spec, self.step_period_s = spec, step_period_s
        self.set_limits(limits, blend_s)
        self._last: np.ndarray | None = None  # the last streamed command / the velocity commanded last
        self._last_ns: int | None = None
        self._trajectory: tuple[np.ndarray, np.ndarray] | None = None  # (absolute times ns, positions) last sent
        self._resuming = True
        self._held: np.ndarray | None = None  # the hold position after a hold (None: the measured one)
        self._resume_ns: int | None = None
        self._resume_from: np.ndarray | None = None

    def set_limits(self, limits: OutputLimits, blend_s: float) -> None:
        self.limits, self.blend_s = limits, blend_s
        self._vel, self._dist, self._lower, self._upper = limits.arrays()
        self._far = far_clamps(self._lower, self._upper)  # once, not at every streamed command

    @property
    def velocity(self) -> bool:
        return self.spec.type == "twist" or self.spec.interface == "velocity"

    def reset(self, now_ns: int | None = None) -> None:
        """After a hold (or before the first command): forget what was sent; the next commands blend from the
        measured state (velocities from zero). A position output keeps where it was commanded to be at
        ``now_ns`` as its hold position."""
        if self.velocity:  # the hold command (zero) is what was commanded last
            self._last = np.zeros(len(self.spec.dims))
        else:
            if now_ns is not None:
                sampled = self._sample(now_ns) if self._trajectory is not None else self._last
                self._held = sampled if sampled is not None else self._held
            self._last = None
        self._last_ns = now_ns if now_ns is not None else self._last_ns
        self._trajectory = None
        self._resuming, self._resume_ns, self._resume_from = True, None, None

    def hold_command(self, measured: np.ndarray | None) -> np.ndarray | None:
        """The command that holds the output: zero velocity or twist; for a position output where its controller
        was last told the joints are now (the arm tracks it: a stale measurement would pull it back), else the
        measured position (None: neither is known)."""
        if self.velocity:
            return np.zeros(len(self.spec.dims))
        if self._held is None and measured is not None:
            # kept: a hold repeated (each refused chunk answers with one) stays where the first one held
            self._held = np.asarray(measured, dtype=np.float64)
        return self._held

    # ----------------------------------------------------------------------------------- trajectories
    def trajectory(self, timed: TimedTrajectory, now_ns: int, measured: np.ndarray | None) -> tuple[TimedTrajectory | None, Hits]:
        """A trajectory for a joint trajectory controller held to the limits (None: every point already past)."""
        n = len(timed.joint_names)
        resuming, self._resuming = self._resuming, False
        if not self.limits.any and not (resuming and measured is not None and self.blend_s > 0):
            return timed, empty_hits(n)
        start_ns = timed.start_time_ns or now_ns
        elapsed = max(0.0, (now_ns - start_ns) / NS)
        keep = timed.times_s > elapsed + 1e-6  # the controller skips points already past on arrival
        if not np.any(keep):
            return None, empty_hits(n)
        times, values = timed.times_s[keep], timed.positions[keep]
        # The first point at least a quarter step ahead: a trajectory a little late on arrival must not find its
        # points past (a controller skips those; finding all of them past it would go to the last one at once).
        times = times + max(0.0, elapsed + MIN_LEAD_STEPS * self.step_period_s - float(times[0]))
        if self.velocity:
            previous = np.zeros(n) if resuming or self._last is None else self._last
            if resuming and self.blend_s > 0:
                values = values * blend_weights(times, elapsed, self.blend_s)[:, None]
            dts = np.diff(np.concatenate([[elapsed], times]))
            values, hits = guard_velocities(values, dts, previous=previous, max_velocity=self._vel,
                                            max_acceleration=self.limits.max_acceleration)  # fmt: skip
            self._last = values[-1]
        else:
            # The path starts where the controller has the joints now (it interpolates from there); the distance
            # limit is from the measured joints.
            reference = next((r for r in (self._sample(now_ns), self._held, measured) if r is not None), None)
            start = measured if measured is not None else reference  # a resume blends from the measured joints
            if resuming and start is not None and self.blend_s > 0:
                values = start + blend_weights(times, elapsed, self.blend_s)[:, None] * (values - start)
            times, values, hits = guard_positions(times, values, start_s=elapsed, reference=reference,
                                                  max_velocity=self._vel, max_distance=self._dist, lower=self._lower,
                                                  upper=self._upper, measured=measured,
                                                  max_acceleration=self.limits.max_acceleration,
                                                  from_rest=resuming)  # fmt: skip
            # Where the controller has the joints from now on: from the reference (where they were) through the points.
            knots_t, knots_p = (times, values) if reference is None else (np.concatenate([[elapsed], times]),
                                                                           np.vstack([reference, values]))
            self._trajectory = (start_ns + np.round(knots_t * NS), knots_p)
            self._held = None
        return dataclasses.replace(timed, times_s=times, positions=values), hits

    def _sample(self, now_ns: int) -> np.ndarray | None:
        """Where the last trajectory sent has the joints now (no measured state): its reference instead."""
        if self._trajectory is None:
            return None
        t, p = self._trajectory
        return np.array([np.interp(now_ns, t, p[:, j]) for j in range(p.shape[1])])

    def stopped(self, now_ns: int) -> None:
        """A zero command was sent outside the guard (a velocity output's chunk ended): it is the last one."""
        if self.velocity:
            self._last, self._last_ns = np.zeros(len(self.spec.dims)), now_ns

    # -------------------------------------------------------------------------------- streamed commands
    def _stream_position(self, target: np.ndarray, dt: float, measured: np.ndarray | None) -> tuple[np.ndarray, Hits]:
        """Clamped into the range; the distance from the measured position shortened to max_distance; then the
        step from the last command shortened to max_velocity · dt (each along its direction). The step comes last:
        shortening the distance afterwards would pull every joint towards a measurement that lags the commands, a
        step beyond max_velocity; a step from a command within max_distance towards a target within it stays
        within it."""
        hits = empty_hits(len(target))
        out = np.clip(target, self._lower, self._upper)
        count_clamps(hits, target, out, self._far)
        if measured is not None:
            out, binding = scale_step(measured, out, self._dist)
            hits["distance"] += binding
        # The step from what the controller was last told (a hold included): a measurement may be a little old.
        reference = next((r for r in (self._last, self._held, measured) if r is not None), None)
        if reference is not None:
            out, binding = scale_step(reference, out, self._vel * dt)
            hits["speed"] += binding
        return out, hits

    def stream(self, values: np.ndarray, now_ns: int, measured: np.ndarray | None) -> tuple[np.ndarray, Hits]:
        """The streamed command due at ``now_ns`` held to the limits."""
        target = np.asarray(values, dtype=np.float64)
        if self._resuming:
            self._resuming, self._resume_ns = False, now_ns
            self._resume_from = None if self.velocity else (measured if measured is not None else self._held)
        # Never more than one step period: after a pause the robot stands where it was last commanded, so a longer
        # wait does not allow a longer step (or a larger change of velocity).
        dt = self.step_period_s if self._last_ns is None else min(self.step_period_s, max(0.0, (now_ns - self._last_ns) / NS))
        w = 1.0
        if self._resume_ns is not None and self.blend_s > 0:
            # the first command one step period into the blend, as a trajectory's first point
            w = float(blend_weights(np.array([(now_ns - self._resume_ns) / NS + self.step_period_s]), 0.0, self.blend_s)[0])
            if w >= 1.0:
                self._resume_ns = None
        if self.spec.type == "twist":
            previous = np.zeros(6) if self._last is None else self._last
            out, hits = guard_twist(w * target, dt, previous=previous, max_linear=self.limits.max_linear_speed,
                                    max_angular=self.limits.max_angular_speed, max_acceleration=self.limits.max_acceleration)  # fmt: skip
        elif self.velocity:
            previous = np.zeros(len(target)) if self._last is None else self._last
            rows, hits = guard_velocities((w * target)[None], dt, previous=previous, max_velocity=self._vel,
                                          max_acceleration=self.limits.max_acceleration)  # fmt: skip
            out = rows[0]
        else:
            if self._resume_from is not None:
                target = self._resume_from + w * (target - self._resume_from)
            out, hits = self._stream_position(target, dt, measured)
        self._last, self._last_ns, self._held = out, now_ns, None
        return out, hits


class SafetyGuard:
    """One robot's guard: its outputs' guards, the hold state, the limit counts and the measured joints."""

    def __init__(self, outputs: Sequence[OutputSpec], limits: Mapping[str, OutputLimits], step_period_s: float,
                 blend_s: float = DEFAULT_BLEND_S, max_measured_age_s: float = 0.5) -> None:  # fmt: skip
        self.outputs = {s.name: OutputGuard(s, limits.get(s.name) or OutputLimits.none(s), step_period_s, blend_s)
                        for s in outputs}  # fmt: skip
        self.state = HoldState()
        self.hits = LimitCounter()
        self.refusals = RefusalCounter()
        self.measured = MeasuredJoints()
        self.max_measured_age_ns = int(max_measured_age_s * NS)

    def set_limits(self, limits: Mapping[str, OutputLimits], blend_s: float) -> None:
        """New limits (a parameter changed); what was commanded stays."""
        for name, guard in self.outputs.items():
            guard.set_limits(limits.get(name) or OutputLimits.none(guard.spec), blend_s)

    def measured_of(self, spec: OutputSpec, now_ns: int | None = None) -> np.ndarray | None:
        """The output's joints as measured (None: a joint not measured, or velocity/twist outputs)."""
        if spec.type == "twist" or not spec.joints:
            return None
        return self.measured.get(spec.joints, now_ns, self.max_measured_age_ns if now_ns is not None else None)

    def chunk_problem(self, spec: OutputSpec, values: np.ndarray) -> Refusal | None:
        """Why an output's converted chunk is no command at all (hold instead), or None (not counted)."""
        return self.outputs[spec.name].limits.refusal(values)

    def check_chunk(self, values: Mapping[str, np.ndarray]) -> Refusal | None:
        """Every output's converted chunk (by output name) checked: the first refusal (the chunk is no command:
        hold instead), or None. A refused chunk is counted in ``refusals`` for every joint at fault."""
        found = [r for name, v in values.items() if (r := self.chunk_problem(self.outputs[name].spec, v)) is not None]
        self.refusals.refused(found)
        return found[0] if found else None

    def trajectory(self, spec: OutputSpec, timed: TimedTrajectory, now_ns: int) -> TimedTrajectory | None:
        guard = self.outputs[spec.name]
        out, hits = guard.trajectory(timed, now_ns, self.measured_of(spec, now_ns))
        self.hits.add(spec.name, guard.limits.labels, hits)
        return out

    def stream(self, spec: OutputSpec, values: np.ndarray, now_ns: int) -> np.ndarray:
        guard = self.outputs[spec.name]
        out, hits = guard.stream(values, now_ns, self.measured_of(spec, now_ns))
        self.hits.add(spec.name, guard.limits.labels, hits)
        return out

    def hold_command(self, spec: OutputSpec, now_ns: int | None = None) -> np.ndarray | None:
        return self.outputs[spec.name].hold_command(self.measured_of(spec, now_ns))

    def hold(self, kind: str, reason: str, now_ns: int | None = None) -> bool:
        """Enter HOLD; every output resumes from the measured state. True when commanding was going on (the
        caller then sends `hold_command` of each output)."""
        entered = self.state.hold(kind, reason)
        self.reset_outputs(now_ns)
        return entered

    def reset_outputs(self, now_ns: int | None = None) -> None:
        for guard in self.outputs.values():
            guard.reset(now_ns)

    def start_over(self) -> None:
        """A new episode: the scene put the arm somewhere else. Every output as at the start (nothing sent, no
        hold position kept; the next commands blend from the measured state); a stop input stays as it is."""
        self.outputs = {name: OutputGuard(g.spec, g.limits, g.step_period_s, g.blend_s) for name, g in self.outputs.items()}


def hold_trajectory(spec: OutputSpec, command: np.ndarray | None, step_period_s: float) -> TimedTrajectory | None:
    """A joint trajectory output's hold: one point at ``command`` reached in one step period, started on receipt
    (None: nothing to hold at; a joint trajectory controller given an empty trajectory holds where it is)."""
    if command is None:
        return None
    return TimedTrajectory(spec.joints, np.array([step_period_s]), np.asarray(command, dtype=np.float64)[None], 0)
