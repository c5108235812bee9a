"""openpi's websocket policy protocol over the fleet scheduler (``websockets`` asyncio server).

Per connection: the metadata map first (one binary frame), then one binary request → one binary reply, in
order. A request that cannot be served gets openpi's error path: the reason as a text frame, then a close
with code 1011 and openpi's close reason; the server and every other connection go on. ``GET /healthz``
answers ``OK``; with an API key, a handshake without ``Authorization: Api-Key <key>`` is refused with 401.
The model runs on the scheduler's thread and requests are decoded on a small pool of decode threads, within
the bounds of ``frame_bounds``, so pings, health checks and new handshakes are served meanwhile. A refused
request (over those bounds, or over ``max_message_bytes``) is counted under ``refused.*`` and logged.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request, Response

from .codec import FrameBounds, FrameRefused, MessageError, pack, unpack
from .layouts import Layout, Observation, ObservationError
from .scheduler import FleetScheduler

log = logging.getLogger(__name__)
ERROR_CLOSE_REASON = "Internal server error. Traceback included in previous frame."  # openpi's
PROTOCOL_ERRORS = (MessageError, ObservationError, FrameRefused)
DECODE_THREADS = 2  # a request's decode is bounded (milliseconds); two keep one slow frame from queueing others


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    default_prompt: str | None = None
    max_message_bytes: int = 16 * 1024 * 1024
    log_period_s: float = 10.0
    metadata: dict[str, Any] | None = None  # None: the layout's
    frame_bounds: FrameBounds = FrameBounds()


class PolicyServer:
    def __init__(self, scheduler: FleetScheduler, layout: Layout, options: ServeOptions) -> None:
        self.scheduler = scheduler
        self.layout = layout
        self.options = options
        self.metadata = dict(layout.metadata if options.metadata is None else options.metadata)
        self.stats = scheduler.stats
        self.open_connections = 0
        self._decoder = ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="oxygen-serve-decode")

    # ------------------------------------------------------------------------------------------ HTTP
    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            return connection.respond(HTTPStatus.OK, "OK\n")
        if not self._authorized(request.headers.get_all("Authorization")):
            self.stats.count("refused.api_key")
            return connection.respond(HTTPStatus.UNAUTHORIZED,
                                      "missing, repeated or wrong 'Authorization: Api-Key <key>' header\n")  # fmt: skip
        if path == "/stats":
            body = {"connected": self.open_connections, **self.stats.snapshot(), **self.scheduler.engine_figures}
            return connection.respond(HTTPStatus.OK, json.dumps(body, sort_keys=True) + "\n")
        if self.scheduler.free_robots == 0:
            self.stats.count("refused.full")
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "every robot slot of this server is taken\n")
        return None  # the websocket handshake goes on (any path: openpi's clients may add one)

    def _authorized(self, headers: list[str]) -> bool:
        """Exactly one ``Authorization`` header holding the key (where one is set); two are refused, not merged."""
        key = self.options.api_key
        if not key:
            return True
        if len(headers) != 1:
            return False
        # websockets decodes header bytes as ASCII with surrogateescape: encode them back the same way
        return hmac.compare_digest(headers[0].encode("utf-8", "surrogateescape"), f"Api-Key {key}".encode())

    # ------------------------------------------------------------------------------------- websocket
    async def _handle(self, ws: ServerConnection) -> None:
        robot = self.scheduler.acquire()
        if robot is None:  # taken between the handshake check and here
            await ws.close(1013, "every robot slot of this server is taken")
            return
        peer = "%s:%s" % ws.remote_address[:2] if ws.remote_address else "?"
        served, why = 0, "closed by the client"
        between_requests = False
        self.stats.count("connections")
        self.open_connections += 1
        log.info("client %s connected as robot %r (%d connected)", peer, robot or "robot0", self.open_connections)
        loop = asyncio.get_running_loop()
        try:
            await ws.send(pack(self.metadata))
            prev_total_ms: float | None = None
            while True:
                start = time.monotonic()
                between_requests = True  # every reply sent: a client may end here (openpi's has no close())
                message = await ws.recv()
                between_requests = False
                received = time.monotonic()
                try:
                    obs = await loop.run_in_executor(self._decoder, self._observation, message)
                    reply = await asyncio.wrap_future(self.scheduler.submit(robot, obs))
                    timing = {"infer_ms": (time.monotonic() - received) * 1000}
                    if prev_total_ms is not None:
                        timing["prev_total_ms"] = prev_total_ms
                    frame = pack({**reply, "server_timing": timing})
                except Exception as exc:  # noqa: BLE001 - every failure ends this connection the protocol's way
                    why = self._describe(exc)
                    await self._fail(ws, exc)
                    break
                await ws.send(frame)
                served += 1
                self.stats.count("requests")
                prev_total_ms = (time.monotonic() - start) * 1000
        except ConnectionClosed as exc:
            if exc.sent is not None and exc.sent.code == CloseCode.MESSAGE_TOO_BIG:  # websockets refused the frame
                why = f"refused: {exc.sent.reason} (--max-message-bytes), closed with 1009"
                self.stats.count("refused.too_big")
            elif exc.rcvd is None and between_requests:  # a client process that ended after its last reply
                why = "ended by the client after its last reply, without a closing handshake"
            elif exc.rcvd is None:
                why = "connection lost during a request"
                self.stats.count("disconnects.abrupt")
        finally:
            self.scheduler.release(robot)
            self.open_connections -= 1
            log.info("client %s left (robot %r, %d replies, %s; %d connected)", peer, robot or "robot0", served, why,
                     self.open_connections)  # fmt: skip

    def _observation(self, message: bytes | str) -> Observation:
        """A request frame → the layout's observation (on a decode thread: the event loop never decodes)."""
        return self.layout.observation(unpack(message, self.options.frame_bounds), self.options.default_prompt)

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, FrameRefused):
            self.stats.count("refused.frame_bounds")
            return f"refused: {exc}"
        self.stats.count(f"errors.{'request' if isinstance(exc, PROTOCOL_ERRORS) else 'server'}")
        return f"{type(exc).__name__}: {exc}"

    async def _fail(self, ws: ServerConnection, exc: BaseException) -> None:
        if isinstance(exc, PROTOCOL_ERRORS):
            text = f"{type(exc).__name__}: {exc}\n"
        else:
            text = "".join(traceback.format_exception(exc))
        try:
            await ws.send(text)
            await ws.close(1011, ERROR_CLOSE_REASON)
        except ConnectionClosed:
            pass

    # -------------------------------------------------------------------------------------- running
    async def _report(self) -> None:
        while True:
            await asyncio.sleep(self.options.log_period_s)
            line = self.stats.period_line(self.open_connections)
            if line:
                log.info("%s", line)

    def serve(self) -> Any:
        """The websockets server (an async context manager)."""
        return serve(self._handle, self.options.host, self.options.port, compression=None,
                     max_size=self.options.max_message_bytes, process_request=self._process_request,
                     server_header=None)  # fmt: skip

    async def run(self, ready: asyncio.Event | None = None) -> None:
        async with self.serve() as server:
            self.server: Server = server
            port = next(iter(server.sockets)).getsockname()[1]
            log.info("serving openpi's websocket protocol on ws://%s:%d (%s layout, %d robot slots, %s)",
                     self.options.host, port, self.layout.name, self.scheduler.free_robots,
                     "one request at a time" if self.scheduler.one_at_a_time else "batched")  # fmt: skip
            reporter = asyncio.create_task(self._report())
            if ready is not None:
                ready.set()
            try:
                await server.serve_forever()
            finally:
                reporter.cancel()
                self._decoder.shutdown(wait=False, cancel_futures=True)
