"""The gRPC server of LeRobot's async-inference service: loopback by default, TLS and an API key when given.

gRPC messages are capped at lerobot's 4 MiB each way (observations larger than that arrive in chunks). Each
robot holds up to two calls at once (``GetActions`` waiting, ``SendObservations``), so the thread pool has two
workers per robot slot and a few spare ones for refusals.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc

from ..scheduler import FleetScheduler
from . import services_pb2_grpc as pb_grpc
from .binding import ServedPolicy
from .service import AsyncInferenceService, LeRobotOptions, api_key_interceptor
from .transfer import MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)
SPARE_WORKERS = 4


@dataclass
class GrpcOptions:
    host: str = "127.0.0.1"
    port: int = 8080  # lerobot's policy server port
    api_key: str | None = None
    tls_cert: str | None = None  # PEM certificate chain and key: TLS; neither: plaintext (lerobot's client)
    tls_key: str | None = None
    log_period_s: float = 10.0


class LeRobotServer:
    def __init__(self, scheduler: FleetScheduler, served: ServedPolicy, options: LeRobotOptions,
                 grpc_options: GrpcOptions) -> None:  # fmt: skip
        if (grpc_options.tls_cert is None) != (grpc_options.tls_key is None):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        self.scheduler = scheduler
        self.service = AsyncInferenceService(scheduler, served, options)
        self.options = grpc_options
        self.stats = scheduler.stats
        self.port: int | None = None

    def start(self) -> grpc.Server:
        """Bind and start serving (raises RuntimeError when the address cannot be bound)."""
        interceptors = []
        if self.options.api_key:
            interceptors.append(api_key_interceptor(self.options.api_key, lambda: self.stats.count("refused.api_key")))
        workers = 2 * (self.scheduler.free_robots + self.service.connected) + SPARE_WORKERS
        server = grpc.server(ThreadPoolExecutor(workers, thread_name_prefix="oxygen-serve-grpc"),
                             interceptors=interceptors,
                             options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                      ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                                      ("grpc.so_reuseport", 0)])  # fmt: skip
        pb_grpc.add_AsyncInferenceServicer_to_server(self.service, server)
        address = f"{self.options.host}:{self.options.port}"
        if self.options.tls_cert:
            pair = (Path(self.options.tls_key).read_bytes(), Path(self.options.tls_cert).read_bytes())  # type: ignore[arg-type]
            self.port = server.add_secure_port(address, grpc.ssl_server_credentials([pair]))
        else:
            self.port = server.add_insecure_port(address)
        server.start()
        self.service.start()
        return server

    async def run(self) -> None:
        server = self.start()
        scheme = "TLS" if self.options.tls_cert else "plaintext"
        log.info("serving LeRobot's async-inference protocol on grpc://%s:%d (%s, %d robot slots, %s)",
                 self.options.host, self.port, scheme, self.scheduler.free_robots,
                 "one request at a time" if self.scheduler.one_at_a_time else "batched")  # fmt: skip
        try:
            while True:
                await asyncio.sleep(self.options.log_period_s)
                line = self.stats.period_line(self.service.connected)
                if line:
                    log.info("%s; counters %s", line, self.stats.snapshot())
        finally:
            self.service.stop()
            server.stop(grace=1.0)
