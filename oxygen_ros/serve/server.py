"""openpi's websocket policy protocol over the fleet scheduler (``websockets`` asyncio server).

Per connection: the metadata map first (one binary frame), then one binary request → one binary reply, in
order. A request that cannot be served gets openpi's error path: the reason as a text frame, then a close
with code 1011 and openpi's close reason; the server and every other connection go on. ``GET /healthz``
answers ``OK``; with an API key, a handshake without ``Authorization: Api-Key <key>`` is refused with 401.
The model runs on the scheduler's thread, so pings, health checks and new handshakes are served meanwhile.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import traceback
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from .codec import MessageError, pack, unpack
from .layouts import Layout, ObservationError
from .scheduler import FleetScheduler

log = logging.getLogger(__name__)
ERROR_CLOSE_REASON = "Internal server error. Traceback included in previous frame."  # openpi's
PROTOCOL_ERRORS = (MessageError, ObservationError)


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    default_prompt: str | None = None
    max_message_bytes: int = 16 * 1024 * 1024
    log_period_s: float = 10.0
    metadata: dict[str, Any] | None = None  # None: the layout's


class PolicyServer:
    def __init__(self, scheduler: FleetScheduler, layout: Layout, options: ServeOptions) -> None:
        self.scheduler = scheduler
        self.layout = layout
        self.options = options
        self.metadata = dict(layout.metadata if options.metadata is None else options.metadata)
        self.stats = scheduler.stats
        self.open_connections = 0

    # ------------------------------------------------------------------------------------------ HTTP
    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            return connection.respond(HTTPStatus.OK, "OK\n")
        if not self._authorized(request.headers.get("Authorization")):
            self.stats.count("refused.api_key")
            return connection.respond(HTTPStatus.UNAUTHORIZED, "missing or wrong 'Authorization: Api-Key <key>' header\n")
        if path == "/stats":
            body = {"connected": self.open_connections, **self.stats.snapshot(), **self.scheduler.engine_figures}
            return connection.respond(HTTPStatus.OK, json.dumps(body, sort_keys=True) + "\n")
        if self.scheduler.free_robots == 0:
            self.stats.count("refused.full")
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "every robot slot of this server is taken\n")
        return None  # the websocket handshake goes on (any path: openpi's clients may add one)

    def _authorized(self, header: str | None) -> bool:
        key = self.options.api_key
        if not key:
            return True
        return header is not None and hmac.compare_digest(header.encode(), f"Api-Key {key}".encode())

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
                    obs = self.layout.observation(unpack(message), self.options.default_prompt)
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
            if exc.rcvd is None and between_requests:  # a client process that ended after its last reply
                why = "ended by the client after its last reply, without a closing handshake"
            elif exc.rcvd is None:
                why = "connection lost during a request"
                self.stats.count("disconnects.abrupt")
        finally:
            self.scheduler.release(robot)
            self.open_connections -= 1
            log.info("client %s left (robot %r, %d replies, %s; %d connected)", peer, robot or "robot0", served, why,
                     self.open_connections)  # fmt: skip

    def _describe(self, exc: BaseException) -> str:
        kind = type(exc).__name__
        self.stats.count(f"errors.{'request' if isinstance(exc, PROTOCOL_ERRORS) else 'server'}")
        return f"{kind}: {exc}"

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
