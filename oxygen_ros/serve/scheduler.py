"""Each connection is a robot of the fleet: its requests go through the engine on one worker thread, batched.

The worker owns the runtime (the engine is used by one thread). It waits for a request, gathers the others
that arrive within ``batch_window_s`` (or until every connected robot has one waiting), turns each into a
frame (a bad one fails alone) and runs them in one engine tick (``PolicyRuntime.step_many``: batched prefill,
one batched chunk call, text forked from each robot's own frame). Between ticks it advances the live text
one batched decode step at a time while no request waits. ``one_at_a_time``: one request per tick, in arrival
order (openpi's server). Robots are created at start (``max_robots``); a connection takes a free one and its
end gives it back: its text requests are cancelled (their KV freed), its noise, schedule and chunk history
reset, so the next connection starts as a fresh robot.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from oxygen_ros.engine import FrameInput, QuestionRefused
from oxygen_ros.engine.mode_names import FLEET_MODES
from oxygen_ros.runtime.policy import InputError, PolicyRuntime

from .layouts import Observation, ObservationError
from .stats import ServeStats
from .text_board import TextBoard

log = logging.getLogger(__name__)


@dataclass
class _Robot:
    name: str
    seed: int
    frames: int = 0  # requests served on the current connection (the frame index text refers to)
    board: TextBoard = field(default_factory=TextBoard)


@dataclass
class _Request:
    robot: str
    obs: Observation
    future: Future
    received: float = field(default_factory=time.monotonic)


class FleetScheduler:
    def __init__(self, runtime: PolicyRuntime, *, max_robots: int = 8, one_at_a_time: bool = False,
                 batch_window_s: float = 0.01, answer_max_tokens: int = 24, stats: ServeStats | None = None) -> None:
        if runtime.mode not in FLEET_MODES:
            raise ValueError(f"the server needs engine_mode {' or '.join(FLEET_MODES)}, not {runtime.mode!r}")
        if max_robots < 1:
            raise ValueError("max_robots must be at least 1")
        self.runtime = runtime
        self.one_at_a_time = one_at_a_time
        self.batch_window_s = batch_window_s
        self.answer_max_tokens = answer_max_tokens
        self.stats = stats or ServeStats()
        seed = runtime.config.seed
        self._robots = {"": _Robot("", seed)}
        for i in range(1, max_robots):
            runtime.add_robot(f"robot{i}")
            self._robots[f"robot{i}"] = _Robot(f"robot{i}", seed + i)
            runtime.engine.robot(f"robot{i}").generator.manual_seed(seed + i)
        self._free = list(self._robots)
        self._pending: list[_Request] = []
        self._released: list[str] = []
        self._cond = threading.Condition()
        self._stop = False
        self.engine_figures: dict[str, int] = {}  # the engine's KV and text figures after the worker's latest round
        self._thread = threading.Thread(target=self._run, name="oxygen-serve-engine", daemon=True)

    # ---------------------------------------------------------------------------------- event loop side
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    @property
    def connected(self) -> int:
        return len(self._robots) - len(self._free)

    @property
    def free_robots(self) -> int:
        return len(self._free)

    def acquire(self) -> str | None:
        """A free robot for a new connection (None: all taken)."""
        with self._cond:
            if not self._free:
                return None
            self._free.sort(key=list(self._robots).index)  # the lowest free robot: connections in order get 0, 1, ...
            return self._free.pop(0)

    def release(self, robot: str) -> None:
        """The connection ended: the worker frees the robot's text and KV, then it is free again."""
        with self._cond:
            self._released.append(robot)
            self._cond.notify_all()

    def submit(self, robot: str, obs: Observation) -> Future:
        future: Future = Future()
        with self._cond:
            self._pending.append(_Request(robot, obs, future))
            self._cond.notify_all()
        return future

    # ------------------------------------------------------------------------------------- worker side
    def _text_live(self) -> bool:
        return self.runtime.mode == "oxygen" and self.runtime.engine.live_requests > 0

    def _take(self) -> tuple[list[_Request], list[str]] | None:
        with self._cond:
            while not (self._pending or self._released or self._stop or self._text_live()):
                self._cond.wait()
            if self._stop:
                return None
            if self._pending and not self.one_at_a_time:  # gather the requests that arrive together
                until = self._pending[0].received + self.batch_window_s
                while len(self._pending) < self.connected and (left := until - time.monotonic()) > 0 and not self._stop:
                    self._cond.wait(left)
            n = 1 if self.one_at_a_time else len(self._pending)
            batch, self._pending = self._pending[:n], self._pending[n:]
            released, self._released = self._released, []
            return batch, released

    def _run(self) -> None:
        while (work := self._take()) is not None:
            batch, released = work
            try:
                for name in released:
                    self._reset(name)
                if batch:
                    self._tick(batch)
                elif self._text_live():
                    self._route(self.runtime.engine.decode_step())
                engine = self.runtime.stats()
                self.engine_figures = {"kv_used_bytes": engine.kv_used_bytes, "live_text_requests": engine.live_requests,
                                       "waiting_text_requests": engine.waiting_requests}  # fmt: skip
            except Exception as exc:  # the worker never dies: the requests of this round get the error
                log.exception("engine failure")
                self.stats.count("errors.engine")
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(exc)

    def _reset(self, name: str) -> None:
        runtime, robot = self.runtime, self._robots[name]
        runtime.engine.cancel_all(name)  # its live text requests end: their KV goes back to the pool
        runtime.engine.restart_schedule(name)
        runtime.engine.robot(name).generator.manual_seed(robot.seed)
        runtime.forget_chunk(name)
        robot.frames, robot.board = 0, TextBoard()
        with self._cond:
            self._free.append(name)

    def _frame(self, request: _Request) -> FrameInput:
        robot, obs = self._robots[request.robot], request.obs
        images = list(obs.images)
        slots = self.runtime.num_image_slots
        if any(image is not None for image in images[slots:]):
            raise ObservationError(f"the model has {slots} image slots; the request fills slot {len(images) - 1}")
        return self.runtime.make_frame(images[:slots], obs.state, obs.prompt, time.time_ns(), robot.frames)

    def _ask(self, request: _Request) -> dict[str, Any]:
        question = request.obs.ask
        assert question is not None
        try:
            tokens = self.runtime.question_tokens(question)
            request_id = self.runtime.ask(tokens, self.answer_max_tokens, robot=request.robot)
        except (InputError, QuestionRefused) as exc:
            self.stats.count("questions.refused")
            return {"refused": str(exc)}
        self._robots[request.robot].board.asked(request_id, question)
        self.stats.count("questions")
        return {"id": request_id}

    def _tick(self, batch: list[_Request]) -> None:
        frames, asked = {}, {}
        for request in batch:
            try:
                frames[request.robot] = self._frame(request)
            except (InputError, ObservationError) as exc:
                self.stats.count(f"errors.{getattr(exc, 'kind', 'observation')}")
                request.future.set_exception(ObservationError(str(exc)))
                continue
            if request.obs.ask is not None:
                asked[request.robot] = self._ask(request)
        if not frames:
            return
        t0 = time.perf_counter()
        results = self.runtime.step_many(frames)
        infer_ms = (time.perf_counter() - t0) * 1000
        for result in results.values():
            self._route(result.events)
        latencies = []
        now = time.monotonic()
        for request in batch:
            if request.robot not in results:
                continue
            robot = self._robots[request.robot]
            reply: dict[str, Any] = {"actions": results[request.robot].actions, "policy_timing": {"infer_ms": infer_ms},
                                     "frame": robot.frames, **robot.board.reply_fields()}  # fmt: skip
            robot.frames += 1
            if request.robot in asked:
                reply["asked"] = asked[request.robot]
            latencies.append((now - request.received) * 1000)
            request.future.set_result(reply)
        self.stats.tick(len(results), latencies)
        if self._text_live():  # text advances at least one step per tick, so it never starves under load
            self._route(self.runtime.engine.decode_step())

    def _route(self, events: list[Any]) -> None:
        boards: Mapping[str, _Robot] = self._robots
        for event in events:
            robot = boards.get(event.robot)
            if robot is not None:
                robot.board.add(event)
