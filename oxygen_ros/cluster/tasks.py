"""Ray tasks for the commands' ``--ray``: join (or start) a cluster, run one task per call with one retry,
hand back each outcome as its task returns, cancel what still runs when the caller stops (Ctrl-C).

A task that raises, or whose worker dies, is retried once by Ray; a second failure comes back as a
`TaskFailure` with the error's last line, for the caller to name. Ray is imported here, and this module only
with ``--ray``: the rest of the package imports nothing of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import ray
from ray.exceptions import RayError

from .args import LOCAL

TASK_RETRIES = 1
Key = TypeVar("Key")


@dataclass(frozen=True)
class RayOptions:
    address: str = LOCAL  # a running cluster's host:port, "auto" (the cluster this machine is part of) or LOCAL
    cpus: float = 1.0  # per task
    gpus: float = 0.0  # per task
    shards: int | None = None  # tasks to split a run into (None: one per task slot of the cluster)

    def summary(self, tasks: int, nodes: set[str], failed_tasks: object) -> dict[str, object]:
        """What a run's report says of the cluster: its address, tasks, nodes used, each task's resources and
        the tasks that failed twice."""
        return {"address": self.address, "tasks": tasks, "nodes": len(nodes), "cpus_per_task": self.cpus,
                "gpus_per_task": self.gpus, "failed_tasks": failed_tasks}  # fmt: skip


@dataclass(frozen=True)
class TaskFailure:
    """A task that failed twice: the error's last line."""

    error: str


@contextmanager
def connected(options: RayOptions) -> Iterator[None]:
    """Joined to the cluster (a local one started, for LOCAL) while inside; left (stopped) after."""
    ray.init(address=None if options.address == LOCAL else options.address, include_dashboard=False,
             log_to_driver=False, configure_logging=False)  # fmt: skip
    try:
        yield
    finally:
        ray.shutdown()


def task_slots(options: RayOptions) -> int:
    """Tasks of ``options.cpus`` the cluster runs at once (at least 1)."""
    return max(1, math.floor(ray.cluster_resources().get("CPU", 1.0) / max(options.cpus, 1e-6)))


def node_id() -> str:
    """The node a task runs on (called inside the task)."""
    return ray.get_runtime_context().get_node_id()


def one_line(exc: BaseException) -> str:
    text = str(exc)
    if "No module named 'oxygen_ros" in text:
        return "a Ray worker cannot import oxygen_ros: install this package on every node (pip install .[ray])"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:500]


def run_tasks(fn: Callable[..., Any], calls: Sequence[tuple[Key, tuple[Any, ...]]],
              options: RayOptions) -> Iterator[tuple[Key, Any]]:  # fmt: skip
    """``fn(*args)`` as one Ray task per ``(key, args)`` of ``calls``; yields ``(key, result)`` as each task
    returns, the result a `TaskFailure` where it failed twice. Inside `connected`. Stopping early (Ctrl-C in the
    caller, or closing this iterator) cancels the tasks still running."""
    task = ray.remote(num_cpus=options.cpus, num_gpus=options.gpus, max_retries=TASK_RETRIES,
                      retry_exceptions=True)(fn)  # fmt: skip
    keys = {task.remote(*args): key for key, args in calls}
    pending = list(keys)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                result = ray.get(done[0])
            except RayError as exc:
                result = TaskFailure(one_line(exc))
            yield keys[done[0]], result
    finally:
        for ref in pending:  # nothing left when every task returned
            ray.cancel(ref, force=True)
