"""LeRobot's ``transport.AsyncInference`` service over the fleet scheduler: each RobotClient is a robot.

A client is known by its gRPC peer (one channel, one TCP connection): ``Ready`` gives it a robot of the fleet
(a fresh one: noise, chunk history and text reset), ``SendPolicyInstructions`` binds its features to the
checkpoint, ``SendObservations`` keeps its latest due observation (lerobot's filter: ``must_go``, else a step not
yet predicted whose joint state moved by at least 1), ``GetActions`` waits up to ``obs_queue_timeout_s`` for one
and submits it to the scheduler, so the robots whose observations are due share one engine tick. The chunk goes
back as lerobot's ``TimedAction`` list (``actions_per_chunk`` of them, timesteps from the observation's, times
``1 / fps`` apart; the first also carries the robot's ``text``, which lerobot's client ignores); with no
observation due the reply is empty, as lerobot's. A client silent for
``idle_release_s`` (or whose channel closed during ``GetActions``) gives its robot back. Every refusal is a gRPC
error saying why, counted under ``lerobot.refused.*``; the server and the other robots go on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
import torch

from ..layouts import Observation, ObservationError
from ..scheduler import FleetScheduler
from . import services_pb2 as pb
from . import services_pb2_grpc as pb_grpc
from .binding import RobotBinding, ServedPolicy, SetupRefused, bind
from .pickles import PickleRefused, PolicySetup, TimedAction, TimedObservation, dumps_lerobot, load_as
from .transfer import TransferError, receive_chunks

log = logging.getLogger(__name__)
SIMILAR_STATE = 1.0  # lerobot's observations_similar atol: a smaller joint-space move is not predicted again


@dataclass
class LeRobotOptions:
    default_prompt: str | None = None
    fps: float = 30.0  # lerobot's environment_dt = 1 / fps spaces the returned actions' timestamps
    obs_queue_timeout_s: float = 2.0  # lerobot's obs_queue_timeout
    idle_release_s: float = 10.0
    max_setup_bytes: int = 1024 * 1024
    max_observation_bytes: int = 64 * 1024 * 1024


@dataclass
class _Client:
    peer: str
    robot: str
    binding: RobotBinding | None = None
    due: tuple[TimedObservation, Observation] | None = None
    last_state: np.ndarray | None = None  # of the latest observation sent to the engine
    predicted: set[int] = field(default_factory=set)
    seen: float = field(default_factory=time.monotonic)
    waiting: int = 0  # GetActions calls in flight


class AsyncInferenceService(pb_grpc.AsyncInferenceServicer):
    def __init__(self, scheduler: FleetScheduler, served: ServedPolicy, options: LeRobotOptions) -> None:
        self.scheduler = scheduler
        self.served = served
        self.options = options
        self.stats = scheduler.stats
        self._clients: dict[str, _Client] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="oxygen-serve-lerobot-reaper", daemon=True)

    # ------------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._reaper.start()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    @property
    def connected(self) -> int:
        return len(self._clients)

    def _reap(self) -> None:
        while not self._stop.wait(min(1.0, self.options.idle_release_s / 4)):
            now = time.monotonic()
            with self._cond:
                idle = [c for c in self._clients.values() if not c.waiting and now - c.seen > self.options.idle_release_s]
            for client in idle:
                self._release(client, f"silent for {self.options.idle_release_s:g} s")

    def _release(self, client: _Client, why: str) -> None:
        with self._cond:
            if self._clients.get(client.peer) is not client:
                return
            del self._clients[client.peer]
            self._cond.notify_all()
        self.scheduler.release(client.robot)
        self.stats.count("lerobot.released")
        log.info("client %s left (robot %r, %s; %d connected)", client.peer, client.robot or "robot0", why,
                 len(self._clients))  # fmt: skip

    # ----------------------------------------------------------------------------------- shared steps
    def _refuse(self, context: grpc.ServicerContext, code: grpc.StatusCode, kind: str, why: str) -> Any:
        self.stats.count(f"lerobot.refused.{kind}")
        log.warning("refused %s from %s: %s", kind, context.peer(), why)
        context.abort(code, why)

    def _client(self, context: grpc.ServicerContext, bound: bool = True) -> _Client:
        with self._cond:
            client = self._clients.get(context.peer())
            if client is not None:
                client.seen = time.monotonic()
        if client is None:
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION, "not_ready", "call Ready first")
        if bound and client.binding is None:  # type: ignore[union-attr]
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION, "no_policy", "call SendPolicyInstructions first")
        return client  # type: ignore[return-value]

    # ------------------------------------------------------------------------------------------ RPCs
    def Ready(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Empty:  # noqa: N802
        peer = context.peer()
        with self._cond:
            old = self._clients.get(peer)
        if old is not None:  # a client that starts again gets a fresh robot, as lerobot's server resets
            self._release(old, "ready again")
        robot = self.scheduler.acquire()
        if robot is None:
            self._refuse(context, grpc.StatusCode.RESOURCE_EXHAUSTED, "full", "every robot slot of this server is taken")
        with self._cond:
            self._clients[peer] = _Client(peer, robot)  # type: ignore[arg-type]
        self.stats.count("connections")
        log.info("client %s ready as robot %r (%d connected)", peer, robot or "robot0", len(self._clients))
        return pb.Empty()

    def SendPolicyInstructions(self, request: pb.PolicySetup, context: grpc.ServicerContext) -> pb.Empty:  # noqa: N802
        client = self._client(context, bound=False)
        try:
            setup = load_as(request.data, PolicySetup, self.options.max_setup_bytes)
            binding = bind(setup, self.served)
        except PickleRefused as exc:
            self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "pickle", str(exc))
        except SetupRefused as exc:
            self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "policy", str(exc))
        client.binding = binding
        log.info("client %s: %s %r, %d actions per chunk, cameras %s", client.peer, setup.policy_type,
                 setup.pretrained_name_or_path, binding.actions_per_chunk, list(binding.image_keys))  # fmt: skip
        return pb.Empty()

    def SendObservations(self, request_iterator: Iterator[pb.Observation], context: grpc.ServicerContext) -> pb.Empty:  # noqa: N802
        client = self._client(context)
        try:
            payload = receive_chunks(request_iterator, self.options.max_observation_bytes)
            timed = load_as(payload, TimedObservation, self.options.max_observation_bytes)
            _check_timed(timed)
            obs = client.binding.observation(timed, self.options.default_prompt)  # type: ignore[union-attr]
        except TransferError as exc:
            self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "stream", str(exc))
        except PickleRefused as exc:
            self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "pickle", str(exc))
        except ObservationError as exc:
            self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "observation", str(exc))
        self.stats.count("lerobot.observations")
        with self._cond:
            if timed.must_go or client.last_state is None or self._due(client, timed, obs):
                client.due = (timed, obs)  # the latest replaces one not yet taken (lerobot's queue of one)
                self._cond.notify_all()
            else:
                self.stats.count("lerobot.observations_skipped")
        return pb.Empty()

    @staticmethod
    def _due(client: _Client, timed: TimedObservation, obs: Observation) -> bool:
        if timed.timestep in client.predicted:
            return False
        if obs.state is None or client.last_state is None:
            return True
        return bool(np.linalg.norm(obs.state - client.last_state) >= SIMILAR_STATE)

    def GetActions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.Actions:  # noqa: N802
        client = self._client(context)
        deadline = time.monotonic() + self.options.obs_queue_timeout_s
        with self._cond:
            client.waiting += 1
            try:
                while client.due is None and self._clients.get(client.peer) is client and not self._stop.is_set():
                    left = deadline - time.monotonic()
                    if left <= 0 or not context.is_active():
                        break
                    self._cond.wait(min(left, 0.25))
                due, client.due = client.due, None
                if due is not None:
                    client.predicted.add(due[0].timestep)
                    client.last_state = due[1].state
            finally:
                client.waiting -= 1
                client.seen = time.monotonic()
        if due is None:
            if not context.is_active():
                self._release(client, "channel closed")
            return pb.Actions()
        timed, obs = due
        try:
            reply = self.scheduler.submit(client.robot, obs).result()
        except ObservationError as exc:
            self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "observation", str(exc))
        except Exception as exc:  # noqa: BLE001 - the engine's failure goes to this client, the server goes on
            self._refuse(context, grpc.StatusCode.INTERNAL, "engine", f"{type(exc).__name__}: {exc}")
        self.stats.count("requests")
        return pb.Actions(data=dumps_lerobot(self._timed_actions(timed, reply, client.binding)))  # type: ignore[arg-type]

    def _timed_actions(self, timed: TimedObservation, reply: dict[str, Any], binding: RobotBinding) -> list[TimedAction]:
        chunk = torch.as_tensor(np.asarray(reply["actions"][: binding.actions_per_chunk], dtype=np.float32))
        dt = 1.0 / self.options.fps
        actions = [TimedAction(timed.timestamp + i * dt, timed.timestep + i, action) for i, action in enumerate(chunk)]
        if actions:  # the robot's text rides on the first action: lerobot's client keeps the attribute and ignores it
            actions[0].text = reply.get("text", {})
        return actions


def _check_timed(timed: TimedObservation) -> None:
    fields = vars(timed)
    timestamp, timestep, observation = fields.get("timestamp"), fields.get("timestep"), fields.get("observation")
    if isinstance(timestep, bool) or not isinstance(timestep, int) or timestep < 0:
        raise ObservationError(f"timestep must be a non-negative integer, got {str(timestep)[:20]!r}")
    if not isinstance(timestamp, (int, float)) or not np.isfinite(timestamp):
        raise ObservationError(f"timestamp must be a finite number, got {str(timestamp)[:20]!r}")
    if not isinstance(observation, dict) or not all(isinstance(k, str) for k in observation):
        raise ObservationError("observation must be a map of names to values")
    if not isinstance(fields.get("must_go", False), bool):
        raise ObservationError("must_go must be a bool")


def api_key_interceptor(key: str, on_refused: Callable[[], None]) -> grpc.ServerInterceptor:
    """Calls without exactly one ``authorization: Api-Key <key>`` metadata entry end with UNAUTHENTICATED."""
    import hmac

    expected = f"Api-Key {key}".encode()

    def deny(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing, repeated or wrong 'authorization: Api-Key <key>' metadata")

    class _Interceptor(grpc.ServerInterceptor):
        def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
            values = [v for k, v in (details.invocation_metadata or ()) if k == "authorization"]
            if len(values) == 1 and hmac.compare_digest(str(values[0]).encode("utf-8", "surrogateescape"), expected):
                return continuation(details)
            on_refused()
            if details.method.endswith("/SendObservations"):
                return grpc.stream_unary_rpc_method_handler(deny)
            return grpc.unary_unary_rpc_method_handler(deny)

    return _Interceptor()
