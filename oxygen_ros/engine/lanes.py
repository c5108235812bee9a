"""Worker threads with their own torch settings, so two model calls can really run at the same time.

The action chunk barely gains from a second CPU thread (measured: within a few percent), so while it runs
on one core a batched decode step can run on the other. A :class:`Lane` is one long-lived thread whose torch
intra-op thread count is set once, in that thread (OpenMP's thread count is per calling thread), and, on
CUDA, whose work goes to a CUDA stream of its own. torch ops release the GIL while they compute, so the
two lanes overlap for real.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")


class Lane:
    """One worker thread: ``threads`` torch CPU threads (0 = leave torch's choice), its own CUDA stream."""

    def __init__(self, name: str, threads: int = 1, device: torch.device | str = "cpu") -> None:
        self.name, self.threads, self.device = name, threads, torch.device(device)
        self._stream: torch.cuda.Stream | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"oxygen-{name}", initializer=self._setup)
        self._ready = threading.Event()

    def _setup(self) -> None:
        if self.threads:
            torch.set_num_threads(self.threads)
        if self.device.type == "cuda":
            self._stream = torch.cuda.Stream(self.device)
        self._ready.set()

    def submit(self, fn: Callable[..., T], *args: object, **kwargs: object) -> Future[T]:
        return self._pool.submit(self._in_stream, fn, *args, **kwargs)

    def run(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """Run on the lane and wait for the result (exceptions propagate to the caller)."""
        return self.submit(fn, *args, **kwargs).result()

    def _in_stream(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        if self._stream is None:
            return fn(*args, **kwargs)
        # PyTorch's side streams do not wait for the default stream by themselves: order this work after
        # everything already queued there (the prefill that wrote the KV this call reads).
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._stream):
            out = fn(*args, **kwargs)
        self._stream.synchronize()  # results leave the lane complete
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True)
