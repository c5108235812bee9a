"""The OxyGen engine: one shared prefill per frame, the action chunk first, text decoded in cross-frame batches.

``tick`` is the critical path (prefill → action chunk → fork the frame's text requests). ``decode_step``
advances every live text request by one token in a single batched model call, whatever frame each request
came from and however long its context is. Between ticks a policy (``policy.py``) decides how many decode
steps fit. Nothing here knows about ROS.

Several robots (``add_robot``): ``tick_many`` takes one frame from each robot that is due, prefills them
all in one batched call (each robot's prefix into its own extent of the pool), samples all their action
chunks in one batched call (B robots × H actions) and forks each robot's text from its own prefix; every robot's text requests advance in the same ``decode_step``. A robot's chunk is the
one a one-robot engine gives on the same frame and noise, up to floating-point rounding.

Why one file of this size: the tick, the batched decode step and the fleet tick share one invariant (what each
request and prefix holds in the KV pool, and when it is released); one class keeps it in one place.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import torch

from oxygen_ros.kv import KVCacheManager, KVPool, SharedPrefix, TextRequest, commit, plan_step
from oxygen_ros.model.network.batched_prefill import PrefixFrame, prefill_batch
from oxygen_ros.model.backends.compiled import ActionSampler
from oxygen_ros.model.backends.compiled_prefill import Prefiller
from oxygen_ros.model.backends.cuda_graphs import GraphedDecoder
from oxygen_ros.model.network.packed_decode import PACK_LIMIT_BYTES, packed_products
from oxygen_ros.model.network.rtc import sample_actions_rtc
from oxygen_ros.model.tokenizers.tokenizer import Tokenizer
from oxygen_ros.model.network.vla import Pi05Model, PrefixOutput

from .lanes import Lane
from .prefill_groups import cache_sized_groups, cpu_prefill_budget, prefill_frame_bytes
from .questions import ASK_TASK, Question, QuestionRefused
from .robots import DEFAULT_ROBOT, RobotSlot, new_slot
from .text_stream import TextStream
from .types import ChunkGuide, FrameInput, TextEvent, TextTask, TickResult

DEFAULT_KV_BUDGET_BYTES = 256 * 1024 * 1024
T = TypeVar("T")
# ``batched_prefill.prefill_batch``'s signature without the model: frames, key and value destinations.
BatchPrefiller = Callable[[Sequence[PrefixFrame], Sequence[torch.Tensor], Sequence[torch.Tensor]], list[PrefixOutput]]


def _sync(device: torch.device) -> None:
    """Wait for queued GPU work so the latencies reported are the real ones."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class EngineStats:
    ticks: int
    decode_steps: int
    tokens_generated: int
    last_prefill_s: float
    last_action_s: float
    last_decode_s: float
    last_decode_batch: int
    kv_used_bytes: int
    kv_budget_bytes: int
    live_prefixes: int
    live_requests: int
    waiting_requests: int
    refused_total: int


class EngineLanes:
    """The worker threads of an engine that overlaps a decode step with the action chunk (see ``lanes``)."""

    def __init__(self, device: torch.device | str, action_threads: int = 1, decode_threads: int = 1) -> None:
        self.action = Lane("action", action_threads, device)
        self.decode = Lane("decode", decode_threads, device)

    def close(self) -> None:
        self.action.close()
        self.decode.close()


class Engine:
    def __init__(
        self,
        model: Pi05Model,
        tasks: Sequence[TextTask] = (),
        tokenizer: Tokenizer | None = None,
        kv_budget_bytes: int = DEFAULT_KV_BUDGET_BYTES,
        admission: str = "wait",
        max_waiting: int = 64,
        ignore_eos: bool = False,
        seed: int = 0,
        action_sampler: ActionSampler | None = None,
        lanes: "EngineLanes | None" = None,
        decode_graphs: bool = False,
        max_questions: int = 32,
        prefiller: Prefiller | None = None,
        pack_decode_weights: bool | None = None,
    ) -> None:
        self.model = model
        self.sample_actions: ActionSampler = action_sampler or model.sample_actions
        self.prefiller: Prefiller = prefiller or model.prefill
        self.lanes = lanes
        self.config = model.config
        self.tasks = list(tasks)
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"text task names must be unique, got {names}")
        self.tokenizer = tokenizer
        self.ignore_eos = ignore_eos
        self._settings = dict(kv_budget_bytes=kv_budget_bytes, admission=admission, max_waiting=max_waiting, seed=seed,
                              decode_graphs=decode_graphs, max_questions=max_questions,
                              pack_decode_weights=pack_decode_weights)
        self._action_sampler = action_sampler
        self._prefiller = prefiller
        # bfloat16 on a CPU: the decode step multiplies by weights packed once for oneDNN (model/network/packed_decode.py;
        # None: where the copies fit PACK_LIMIT_BYTES, True: whatever they take, False: never).
        # ``packed_decode`` may be switched off later (a benchmark compares both on the same requests).
        self.packed_decode = pack_decode_weights is not False
        self.packed_decode_bytes = 0
        if self.packed_decode:
            self.packed_decode_bytes = model.pack_decode_weights(1 << 62 if pack_decode_weights else PACK_LIMIT_BYTES)
        b = self.config.backbone
        pool = KVPool.from_budget_bytes(kv_budget_bytes, b.depth, b.num_kv_heads, b.head_dim, model.dtype, model.device)
        self.kv = KVCacheManager(pool, self.config.max_prefix_tokens, admission, max_waiting)  # type: ignore[arg-type]
        # decode_graphs (CUDA): decode steps replayed from CUDA graphs at bucketed batch sizes and widths.
        self.graphed_decoder: GraphedDecoder | None = None
        if decode_graphs:
            longest = max((len(t.continuation) + t.max_tokens for t in self.tasks), default=0)
            self.graphed_decoder = GraphedDecoder(model, pool.k, pool.v, self.config.max_prefix_tokens + longest)
        self._streams: dict[int, TextStream] = {}
        self._question_stops: dict[int, tuple[str, ...]] = {}  # stop strings of asked questions, by request id
        self._seq: dict[int, int] = {}
        self._owner: dict[int, str] = {}  # request id → the robot it was forked for
        # The latest frame prefix's size bounds admission estimates; until one is seen, the largest possible.
        self._robots: dict[str, RobotSlot] = {
            DEFAULT_ROBOT: new_slot(DEFAULT_ROBOT, seed, max_questions, self.config.max_prefix_tokens)}
        self._decode_steps = 0
        self._tokens = 0
        self._last = {"prefill": 0.0, "action": 0.0, "decode": 0.0}
        self._last_batch = 0
        # On a CPU a batched prefill call takes only the frames whose activations fit the cache (prefill_groups).
        self.prefill_cache_budget = cpu_prefill_budget(2 if lanes else 1) if model.device.type == "cpu" else None

    # ------------------------------------------------------------------------------------------ robots
    @property
    def robots(self) -> list[str]:
        return list(self._robots)

    def add_robot(self, name: str, seed: int | None = None) -> None:
        """Serve one more robot: its own schedule, noise and questions, and a KV reserve for its prefill."""
        if not name or name in self._robots:
            raise ValueError(f"robot names must be non-empty and unique, got {name!r} (have {self.robots})")
        self.kv.add_reserve()
        warm_up_batch = getattr(self.prefiller, "warm_up_batch", None)
        if warm_up_batch is not None:  # a compiled prefill's batched graphs: compiled now, not on the first tick
            warm_up_batch()
        s = self._settings
        seed = s["seed"] + len(self._robots) if seed is None else seed  # type: ignore[operator]
        self._robots[name] = new_slot(name, seed, s["max_questions"], self.config.max_prefix_tokens)  # type: ignore[arg-type]

    def robot(self, name: str = DEFAULT_ROBOT) -> RobotSlot:
        try:
            return self._robots[name]
        except KeyError:
            raise ValueError(f"unknown robot {name!r}; this engine serves {self.robots}") from None

    @property
    def generator(self) -> torch.Generator:
        return self._robots[DEFAULT_ROBOT].generator

    @property
    def questions(self):  # noqa: ANN201 - the default robot's QuestionQueue
        return self._robots[DEFAULT_ROBOT].questions

    # ------------------------------------------------------------------------------------------ frames
    def prefill(self, frame: FrameInput, robot: str = DEFAULT_ROBOT,
                prefiller: Prefiller | None = None) -> tuple[SharedPrefix, float]:
        """Prefill one observation into the pool; returns the prefix (held by the caller) and seconds.
        ``prefiller`` overrides the engine's."""
        t0 = time.perf_counter()
        prefix = self._new_prefix(frame)
        try:
            pool = self.kv.pool
            out = (prefiller or self.prefiller)(
                frame.images, frame.image_mask, frame.prompt_tokens, pool.view_k(prefix.extent), pool.view_v(prefix.extent)
            )
            assert out.length == prefix.length
            self.robot(robot).prefix_tokens = prefix.length
            _sync(self.model.device)
        except BaseException:
            self.kv.release(prefix)
            raise
        return prefix, time.perf_counter() - t0

    def _new_prefix(self, frame: FrameInput) -> SharedPrefix:
        """Room in the pool for one frame's prefix (its valid images' tokens and its prompt)."""
        n_img = int(frame.image_mask.sum()) * self.config.tokens_per_image
        return self.kv.new_prefix(n_img + frame.prompt_tokens.numel(), frame.frame_seq, frame.stamp_ns)

    def _batch_prefiller(self) -> BatchPrefiller | None:
        """The batched form of the engine's prefiller (``prefill_batch``), or None where it has none: the eager
        batched prefill for the eager prefiller, the compiled batched layers for the compiled one
        (``FusedPrefill.prefill_batch``)."""
        if self.prefiller == self.model.prefill:
            return partial(prefill_batch, self.model)
        return getattr(self.prefiller, "prefill_batch", None)

    @property
    def batches_prefill(self) -> bool:
        """Whether :meth:`tick_many` prefills several frames in one call (the eager prefiller), not one by one."""
        return self._batch_prefiller() is not None

    def _split_over_lanes(self, names: list[str], run: Callable[[list[str]], T]) -> list[tuple[list[str], Future[T]]]:
        """``run`` over ``names``: on a CPU engine with lanes, two halves at once, one on each lane (one torch thread
        each); otherwise all of them in the caller's thread.

        Two single-thread calls side by side use two cores better than one call with two threads (measured: the
        prefill gains about 1.3-1.4x from a second intra-op thread, two lanes about 2x). The halves write disjoint
        extents of the pool. Returns (names, future) pairs; every future is done when this returns."""
        if self.lanes is None or self.model.device.type != "cpu" or len(names) < 2:
            done: Future[T] = Future()
            done.set_result(run(names))
            return [(names, done)]
        half = (len(names) + 1) // 2
        parts = [(names[:half], self.lanes.action.submit(run, names[:half])),
                 (names[half:], self.lanes.decode.submit(run, names[half:]))]
        for _, future in parts:
            future.exception()  # wait for both before any result is read (or a failure raised)
        return parts

    def prefill_many(self, frames: Mapping[str, FrameInput], exact: bool = False
                     ) -> tuple[dict[str, SharedPrefix], dict[str, float]]:
        """Prefill several robots' frames (by robot name) into their own extents of the pool, in batched model
        calls: the prefixes right-padded to the longest, each robot's padding hidden from every query, so each
        robot's KV equals its own :meth:`prefill` up to float rounding. One call, except on a CPU: a half on each
        lane, each half in as few calls as fit the last-level cache (``prefill_groups``).

        Returns each robot's prefix (held by the caller) and seconds: the batched calls' time, the same for all.
        One frame, ``exact`` (bit for bit the one-robot prefill) or a prefiller without a batched form: each
        frame by :meth:`prefill`, each robot its own time. On any failure no prefix stays allocated."""
        for name in frames:
            self.robot(name)  # unknown names fail before anything is allocated
        batch = None if exact or len(frames) < 2 else self._batch_prefiller()
        prefixes: dict[str, SharedPrefix] = {}
        seconds: dict[str, float] = {}
        try:
            if batch is None:
                for name, frame in frames.items():
                    prefixes[name], seconds[name] = self.prefill(frame, name)
                return prefixes, seconds
            t0 = time.perf_counter()
            for name, frame in frames.items():
                prefixes[name] = self._new_prefix(frame)
            pool = self.kv.pool
            names = list(frames)
            outs = {}
            sizes = {n: prefill_frame_bytes(self.config, self.model.dtype, prefixes[n].length) for n in names}

            def run(group: list[str]) -> list[PrefixOutput]:  # one lane's frames, in calls that fit the cache
                return [out for part in cache_sized_groups(group, sizes, self.prefill_cache_budget) for out in batch(
                    [(frames[n].images, frames[n].image_mask, frames[n].prompt_tokens) for n in part],
                    [pool.view_k(prefixes[n].extent) for n in part], [pool.view_v(prefixes[n].extent) for n in part])]

            for group, future in self._split_over_lanes(names, run):
                outs.update(zip(group, future.result()))
            for name, prefix in prefixes.items():
                assert outs[name].length == prefix.length
                self.robot(name).prefix_tokens = prefix.length
            _sync(self.model.device)
        except BaseException:
            for prefix in prefixes.values():
                self.kv.release(prefix)
            raise
        elapsed = time.perf_counter() - t0
        return prefixes, {name: elapsed for name in prefixes}

    def act(
        self, prefix: SharedPrefix, noise: torch.Tensor | None = None, guide: ChunkGuide | None = None,
        sampler: ActionSampler | None = None,
    ) -> tuple[torch.Tensor, float]:
        """Sample one action chunk from a prefix, reading its KV in place; with a guide, by real-time chunking
        (through the sampler's ``sample_rtc`` where it has one: the compiled network and its compiled backward;
        else the eager network). ``sampler`` overrides the engine's."""
        t0 = time.perf_counter()
        if noise is None:
            noise = self.sample_noise()
        pool = self.kv.pool
        k, v = pool.view_k(prefix.extent), pool.view_v(prefix.extent)
        sample = sampler or self.sample_actions
        args: tuple = (k, v, noise)
        if guide is not None:
            sample = getattr(sample, "sample_rtc", partial(sample_actions_rtc, self.model))
            args = (k, v, noise, guide.target, guide.weights, guide.beta)
        actions = self.lanes.action.run(sample, *args) if self.lanes else sample(*args)
        _sync(self.model.device)
        return actions, time.perf_counter() - t0

    def act_batch(self, prefixes: Sequence[SharedPrefix], noise: torch.Tensor) -> tuple[torch.Tensor, float]:
        """One action chunk per prefix in one batched call: noise [B, H, A] → actions [B, H, A]. A prefix of
        one uses :meth:`act` (the one-robot path); the sampler's ``sample_batch`` where it has one."""
        if len(prefixes) == 1:
            actions, seconds = self.act(prefixes[0], noise[0])
            return actions.unsqueeze(0), seconds
        t0 = time.perf_counter()
        pool = self.kv.pool
        ks = [pool.view_k(p.extent) for p in prefixes]
        vs = [pool.view_v(p.extent) for p in prefixes]
        sample = getattr(self.sample_actions, "sample_batch", self.model.sample_actions_batch)
        actions = self.lanes.action.run(sample, ks, vs, noise) if self.lanes else sample(ks, vs, noise)
        _sync(self.model.device)
        return actions, time.perf_counter() - t0

    def restart_schedule(self, robot: str = DEFAULT_ROBOT) -> None:
        """Count ticks from 0 again, so the next tick starts every task (a new episode in the simulator)."""
        self.robot(robot).ticks = 0

    def due_tasks(self, robot: str = DEFAULT_ROBOT) -> list[TextTask]:
        """The tasks the schedule starts on the robot's next tick."""
        return [t for t in self.tasks if t.due(self.robot(robot).ticks)]

    def clone_with_model(self, model: Pi05Model) -> "Engine":
        """A second, isolated engine (own KV pool) with the same tasks and settings on another model."""
        same = model is self.model
        return Engine(model, self.tasks, self.tokenizer, ignore_eos=self.ignore_eos,
                      action_sampler=self._action_sampler if same else None,
                      prefiller=self._prefiller if same else None, **self._settings)  # type: ignore[arg-type]

    def sample_noise(self, robot: str = DEFAULT_ROBOT) -> torch.Tensor:
        generator = self.robot(robot).generator
        return torch.randn(self.config.action_horizon, self.config.action_dim, generator=generator)

    def start_requests(self, prefix: SharedPrefix, frame: FrameInput, tasks: Sequence[TextTask],
                       robot: str = DEFAULT_ROBOT) -> TickResult:
        """Fork text requests from a prefix and start waiting ones; fills started/waiting/refused lists."""
        result = TickResult(frame.frame_seq, frame.stamp_ns, robot=robot)
        t0 = time.perf_counter()
        for request in self.kv.admit_waiting(prefix, frame.frame_seq, frame.stamp_ns, robot):
            self._begin(request)
            result.started.append((request.id, request.task))
        for task in tasks:
            self._submit(result, prefix, frame, task.name, list(task.continuation), task.max_tokens, robot=robot)
        for question in self.robot(robot).questions.take_all():  # asked since the last tick: forked from this frame
            self._submit(result, prefix, frame, ASK_TASK, list(question.continuation), question.max_tokens, question.id,
                         robot)
        result.text_start_s = time.perf_counter() - t0
        return result

    def _submit(self, result: TickResult, prefix: SharedPrefix, frame: FrameInput, task: str, continuation: list[int],
                max_tokens: int, request_id: int | None = None, robot: str = DEFAULT_ROBOT) -> None:
        admission = self.kv.submit(task, prefix, continuation, max_tokens, frame.frame_seq, frame.stamp_ns, request_id,
                                   robot)
        self._owner[admission.request_id] = robot
        if admission.status == "admitted":
            self._begin(admission.request)
            result.started.append((admission.request_id, task))
        elif admission.status == "waiting":
            result.waiting.append((admission.request_id, task))
        else:
            self._question_stops.pop(admission.request_id, None)
            self._owner.pop(admission.request_id, None)
            result.refused.append((admission.request_id, task, admission.reason))
        for spec in admission.dropped:
            self._question_stops.pop(spec.id, None)
            self._owner.pop(spec.id, None)
            result.refused.append((spec.id, spec.task, "queue_full"))

    def tick(
        self, frame: FrameInput, noise: torch.Tensor | None = None, tasks: Sequence[TextTask] | None = None,
        decode_during_action: bool = False,
    ) -> TickResult:
        """The critical path: shared prefill → action chunk → fork this frame's text requests.

        ``tasks`` overrides the schedule (``[]`` = action only); by default the tasks due on this tick start.
        ``decode_during_action`` (needs ``lanes``): one batched decode step of the requests already live runs on
        the decode lane while the action chunk runs on the action lane; its events are in ``result.events``.
        The requests this tick starts join the next step. Each request's tokens are the same either way.
        """
        due = self.due_tasks() if tasks is None else list(tasks)
        slot = self._robots[DEFAULT_ROBOT]
        slot.ticks += 1
        slot.chunks += 1
        prefix, prefill_s = self.prefill(frame)
        side = None
        if decode_during_action and self.lanes is not None and self.kv.running():
            side = self.lanes.decode.submit(self.decode_step)
        try:
            actions, action_s = self.act(prefix, noise, frame.guide)
        finally:
            events = side.result() if side is not None else []  # the KV manager is touched by one thread at a time
        try:
            wanted = due or self.kv.waiting_count or len(self.questions)
            result = self.start_requests(prefix, frame, due) if wanted else None
        finally:
            self.kv.release(prefix)  # text requests hold their own references
        self._last["prefill"], self._last["action"] = prefill_s, action_s
        out = result or TickResult(frame.frame_seq, frame.stamp_ns)
        out.actions, out.prefill_s, out.action_s, out.prefix_tokens = actions.cpu().numpy(), prefill_s, action_s, prefix.length
        out.events = events
        return out

    def tick_many(self, frames: Mapping[str, FrameInput], noise: Mapping[str, torch.Tensor] | None = None,
                  tasks: Sequence[TextTask] | None = None, exact: bool = False,
                  decode_during_action: bool = False) -> dict[str, TickResult]:
        """One tick of several robots: ``frames`` by robot name (the robots due and with fresh inputs; the
        others are simply absent, and untouched). All frames are prefilled in one batched call, each into its
        own extent of the shared pool (:meth:`prefill_many`); all chunks are sampled in one batched call (each
        robot's own noise, or ``noise[name]``); then each robot's due text forks from its own prefix. A frame
        with a chunk guide (real-time chunking) is sampled on its own.

        ``exact``: every chunk bit for bit what a one-robot engine gives (a closed loop then takes the same
        path; padding a shorter prefix changes the rounding of its attention). Each frame is prefilled on its
        own then, and only prefixes of equal length share a chunk call, and only on the eager network (a
        compiled network's code depends on the batch).

        With lanes on a CPU the batched prefill runs as two halves, one on each lane (``_split_over_lanes``);
        ``decode_during_action`` (needs ``lanes``): one batched decode step of the requests already live runs on
        the decode lane while the chunks are sampled, as in :meth:`tick`; its events (every robot's) are in the
        first robot's ``events``.

        Returns each robot's TickResult: ``prefill_s`` the batched prefill call's time (each robot's own
        prefill where they run one by one: ``exact``, one frame, the compiled prefiller), ``action_s`` the
        batched chunk call's time.
        """
        names = list(frames)
        for name in names:
            self.robot(name)  # unknown names fail before anything is allocated
        due = {n: self.due_tasks(n) if tasks is None else list(tasks) for n in names}
        t0 = time.perf_counter()
        prefixes, prefill_s = self.prefill_many({n: frames[n] for n in names}, exact)
        prefill_total = time.perf_counter() - t0
        results: dict[str, TickResult] = {}
        events: list[TextEvent] = []
        try:
            noises = {n: noise[n] if noise and n in noise else self.sample_noise(n) for n in names}
            actions: dict[str, torch.Tensor] = {}
            action_s: dict[str, float] = {}
            side = None
            if decode_during_action and self.lanes is not None and self.kv.running():
                side = self.lanes.decode.submit(self.decode_step)
            try:
                for group in self._action_groups([n for n in names if frames[n].guide is None], prefixes, exact):
                    batch, seconds = self.act_batch([prefixes[n] for n in group], torch.stack([noises[n] for n in group]))
                    for i, n in enumerate(group):
                        actions[n], action_s[n] = batch[i], seconds
                for n in names:
                    if n not in actions:
                        actions[n], action_s[n] = self.act(prefixes[n], noises[n], frames[n].guide)
            finally:
                events = side.result() if side is not None else []  # the KV manager is touched by one thread at a time
            for n in names:
                slot = self._robots[n]
                slot.ticks += 1
                slot.chunks += 1
                frame = frames[n]
                wanted = due[n] or self.kv.waiting_of(n) or len(slot.questions)
                result = self.start_requests(prefixes[n], frame, due[n], n) if wanted else None
                out = result or TickResult(frame.frame_seq, frame.stamp_ns, robot=n)
                out.actions, out.prefill_s, out.action_s = actions[n].cpu().numpy(), prefill_s[n], action_s[n]
                out.prefix_tokens = prefixes[n].length
                results[n] = out
            if events:  # the overlapped decode step's events, every robot's, on the first result
                first = results[names[0]]
                first.events = [*events, *first.events]
        finally:
            for prefix in prefixes.values():
                self.kv.release(prefix)  # text requests hold their own references
        if results:
            self._last["prefill"] = prefill_total
            self._last["action"] = max(r.action_s for r in results.values())
        return results

    def _action_groups(self, names: list[str], prefixes: Mapping[str, SharedPrefix], exact: bool) -> list[list[str]]:
        """The robots whose chunks share one batched call."""
        if not exact:
            return [names] if names else []
        if self.sample_actions != self.model.sample_actions:
            return [[n] for n in names]
        by_length: dict[int, list[str]] = {}
        for n in names:
            by_length.setdefault(prefixes[n].length, []).append(n)
        return list(by_length.values())

    # -------------------------------------------------------------------------------------------- text
    def _begin(self, request: TextRequest) -> None:
        """Register a started request. Its continuation prompt is fed by the next decode step, batched with
        everything else, so the tick's critical path ends with the action chunk."""
        task = next((t for t in self.tasks if t.name == request.task), None)
        stop = self._question_stops.pop(request.id, ()) if request.task == ASK_TASK else (task.stop if task else ())
        self._streams[request.id] = TextStream(self.tokenizer, stop)
        self._seq[request.id] = 0

    @property
    def live_requests(self) -> int:
        return len(self.kv.running())

    def decode_step(self) -> list[TextEvent]:
        """Advance every live request by one token in one batched call; returns the text events.

        Requests started since the last step feed their continuation prompts in the same call (one row per
        token), so a step also yields each new request's first token.
        """
        running = self.kv.running()
        if not running:
            return []
        t0 = time.perf_counter()
        plan = plan_step(running, self.model.device)
        pool = self.kv.pool
        next_tokens = self.graphed_decoder.step(plan) if self.graphed_decoder else None
        if next_tokens is None:  # no recorded graph fits (or none are used): the eager step
            with packed_products() if self.packed_decode else contextlib.nullcontext():  # where the model has them
                hidden = self.model.extend(plan.tokens, plan, pool.k, pool.v)
                next_tokens = self.model.greedy_tokens(hidden[plan.last_rows]).tolist()
        commit(running)
        events = [self._accept(r, tok) for r, tok in zip(running, next_tokens)]
        self._decode_steps += 1
        self._tokens += len(events)
        self._last["decode"], self._last_batch = time.perf_counter() - t0, len(events)
        return events

    def _accept(self, request: TextRequest, token: int) -> TextEvent:
        now = time.monotonic()
        if request.first_token_at is None:
            request.first_token_at = now
        stream = self._streams[request.id]
        is_eos = token == self.config.eos_token_id and not self.ignore_eos
        request.generated.append(token)
        text = "" if is_eos else stream.push(token)
        reason = ""
        if is_eos:
            reason = "eos"
        elif stream.stopped:
            reason = "stop"
        elif len(request.generated) >= request.max_tokens:
            reason = "max_tokens"
        if reason:
            if reason != "stop":
                text += stream.finish()
            return self._end(request, reason, text, [token])
        return self._event(request, text, [token], final=False, reason="")

    def _end(self, request: TextRequest, reason: str, text: str, tokens: list[int]) -> TextEvent:
        self.kv.finish(request, reason)
        event = self._event(request, text, tokens, final=True, reason=reason)
        self._streams.pop(request.id, None)
        self._seq.pop(request.id, None)
        self._owner.pop(request.id, None)
        return event

    def _event(self, request: TextRequest, text: str, tokens: list[int], final: bool, reason: str) -> TextEvent:
        seq = self._seq[request.id]
        self._seq[request.id] = seq + 1
        robot = self._owner.get(request.id, DEFAULT_ROBOT)
        self._robots[robot].tokens += len(tokens)
        return TextEvent(request.id, request.task, seq, text, tokens, final, reason, request.frame_seq,
                         request.frame_stamp_ns, robot)

    def drain(self, max_steps: int = 100_000) -> list[TextEvent]:
        """Decode until no request is live (the ``shared``/``sequential`` modes finish text inside a frame)."""
        events: list[TextEvent] = []
        for _ in range(max_steps):
            if not self.kv.running():
                break
            events += self.decode_step()
        return events

    # ---------------------------------------------------------------------------------------- questions
    def question_refusal(self, n_continuation: int, max_tokens: int, robot: str = DEFAULT_ROBOT) -> str | None:
        """Why a question of this size would be refused now, or None. Reads counters only, so another thread
        may ask before handing the question over (the engine's own `ask` decides for good)."""
        if n_continuation < 1 or max_tokens < 1:
            return f"a question needs at least one prompt token and max_tokens >= 1 (got {n_continuation}, {max_tokens})"
        slot = self.robot(robot)
        if slot.questions.full():
            return f"queue full: {len(slot.questions)} questions already wait for the next frame"
        pending = sum(r.questions.tokens_needed for r in self._robots.values())
        return self.kv.refusal(n_continuation + max_tokens, slot.prefix_tokens, pending)

    def ask(self, continuation: Sequence[int], max_tokens: int, stop: Sequence[str] = (),
            robot: str = DEFAULT_ROBOT) -> int:
        """Queue a question for the robot's next tick, which forks it from that frame's prefix after the action
        chunk.

        Returns its request id (its TextEvents carry it, task ``ask``); raises QuestionRefused with the reason.
        The next tick may still refuse it (KV memory, queue): then its id is in that TickResult's ``refused``.
        """
        reason = self.question_refusal(len(continuation), max_tokens, robot)
        if reason:
            raise QuestionRefused(reason)
        question = Question(self.kv.new_request_id(), tuple(int(t) for t in continuation), int(max_tokens), tuple(stop))
        self.robot(robot).questions.push(question)
        self._owner[question.id] = robot
        if question.stop:
            self._question_stops[question.id] = question.stop
        return question.id

    def _cancelled(self, request_id: int, task: str) -> TextEvent:
        """The final event of a request that never started (a pending question, a waiting request)."""
        self._question_stops.pop(request_id, None)
        robot = self._owner.pop(request_id, DEFAULT_ROBOT)
        return TextEvent(request_id, task, 0, "", [], True, "cancelled", -1, 0, robot)

    def cancel(self, request_id: int) -> TextEvent | None:
        """End one request: a live one (its KV is freed), a question not forked yet, or a waiting one.

        Returns its final event (reason ``cancelled``), or None when the id is not pending or live."""
        request = self.kv.get(request_id)
        if request is not None:
            return self._end(request, "cancelled", self._streams[request.id].finish(), [])
        slot = self._robots.get(self._owner.get(request_id, DEFAULT_ROBOT), self._robots[DEFAULT_ROBOT])
        question = slot.questions.remove(request_id)
        spec = self.kv.cancel_waiting(request_id) if question is None else None
        if question is None and spec is None:
            return None
        return self._cancelled(request_id, ASK_TASK if question is not None else spec.task)  # type: ignore[union-attr]

    def cancel_all(self, robot: str | None = None) -> list[TextEvent]:
        """Finish every live request (of one robot, or of all) with reason ``cancelled`` (shutdown, a new
        episode), and every question not started yet; returns their final events. Scheduled tasks' waiting
        requests are dropped silently (nothing streamed)."""
        mine = lambda rid: robot is None or self._owner.get(rid, DEFAULT_ROBOT) == robot  # noqa: E731
        events = [self._end(r, "cancelled", self._streams[r.id].finish(), []) for r in self.kv.running() if mine(r.id)]
        for slot in self._robots.values():
            if robot is None or slot.name == robot:
                events += [self._cancelled(q.id, ASK_TASK) for q in slot.questions.take_all()]
        for rid in self.kv.waiting_ids(robot):
            spec = self.kv.cancel_waiting(rid)
            if spec is not None and spec.task == ASK_TASK:
                events.append(self._cancelled(rid, ASK_TASK))
            self._owner.pop(rid, None)
        return events

    def take_peaks(self) -> tuple[int, int]:
        """Peak KV bytes and live requests since the previous call (``KVCacheManager.take_peaks``)."""
        return self.kv.take_peaks()

    def stats(self) -> EngineStats:
        kv = self.kv.stats()
        return EngineStats(
            ticks=sum(r.ticks for r in self._robots.values()),
            decode_steps=self._decode_steps,
            tokens_generated=self._tokens,
            last_prefill_s=self._last["prefill"],
            last_action_s=self._last["action"],
            last_decode_s=self._last["decode"],
            last_decode_batch=self._last_batch,
            kv_used_bytes=kv.used_bytes,
            kv_budget_bytes=kv.budget_bytes,
            live_prefixes=kv.live_prefixes,
            live_requests=kv.live_requests,
            waiting_requests=kv.waiting,
            refused_total=kv.refused_total,
        )
