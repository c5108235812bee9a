"""``oxygen-sim eval --ray``: the table-top evaluation's episodes as Ray tasks, on a cluster or a local one.

The episodes' specs are split into shards (contiguous runs of the spec list); each shard is one Ray task that
loads one engine from the run's configuration and runs its episodes (``--envs`` at once, batched as on one
machine), and returns their per-episode results. Every episode's action noise is seeded by its own spec
(``PolicyRuntime.start_episode``), so an episode's record does not depend on which task ran it or beside
which others: the records equal one machine's for the same seeds, bit for bit, with the same ``--envs``
batching (exact) and the same torch thread count (``--num-threads``; a task without it uses ``--ray-cpus``).

What travels: the configuration, the evaluation settings and the specs go in each task's arguments (Ray's
object store); the checkpoint and tokenizer are read by each task from the paths the parameters file names,
which every node must see (a shared path, or the same files at the same path). Every node needs this package
installed (``pip install .[ray]``); a task whose worker cannot import it fails with one line saying so.

A task that fails is retried once by Ray (a worker that died, or an exception), then named in the summary
with its seeds; its episodes are not counted as run. Ray is imported here only, and this module only with
``--ray``: the rest of the package imports nothing of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError

from oxygen_ros.runtime import RuntimeConfig
from oxygen_ros.runtime.paths import PATH_FIELDS

from .episode import EpisodeSpec
from .evaluate import EpisodeResult, EvalSettings, evaluate

LOCAL = "local"  # --ray without an address: a cluster of this machine, started for the run
TASK_RETRIES = 1


@dataclass(frozen=True)
class RayOptions:
    address: str = LOCAL  # a running cluster's host:port, "auto" (the cluster this machine is part of) or LOCAL
    cpus: float = 1.0  # per task
    gpus: float = 0.0  # per task
    shards: int | None = None  # None: one per task slot of the cluster (its CPUs ÷ cpus), at most one per episode


def _run_shard(config: RuntimeConfig, settings: EvalSettings, specs: list[EpisodeSpec], envs: int,
               exact: bool) -> tuple[list[EpisodeResult], RuntimeConfig, str]:  # fmt: skip
    """One task: load the engine, run the shard's episodes; their results, the loaded configuration and the
    node that ran them."""
    from oxygen_ros.runtime import PolicyRuntime

    runtime = PolicyRuntime.load(config)
    results = list(evaluate(runtime, specs, settings, min(envs, len(specs)), exact))
    return results, runtime.config, ray.get_runtime_context().get_node_id()


def with_absolute_paths(config: RuntimeConfig) -> RuntimeConfig:
    """The model file paths of ``config`` as absolute paths (a task's working directory is not the driver's)."""
    found = {f: str(Path(v).expanduser().resolve()) for f in PATH_FIELDS
             if isinstance(v := getattr(config, f, None), str) and v and Path(v).expanduser().exists()}  # fmt: skip
    return dataclasses.replace(config, **found)


def split(specs: list[EpisodeSpec], shards: int) -> list[list[EpisodeSpec]]:
    """``specs`` in ``shards`` contiguous runs of near-equal length (none empty)."""
    shards = max(1, min(shards, len(specs)))
    size, extra = divmod(len(specs), shards)
    out, start = [], 0
    for i in range(shards):
        end = start + size + (i < extra)
        out.append(specs[start:end])
        start = end
    return out


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    if "No module named 'oxygen_ros" in text:
        return "a Ray worker cannot import oxygen_ros: install this package on every node (pip install .[ray])"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:500]


@dataclass
class RayEvaluation:
    """Iterating runs the tasks and yields each episode result as its task returns (for the progress bar);
    afterwards ``failed`` names the tasks that failed twice, ``config`` is the loaded configuration."""

    config: RuntimeConfig
    settings: EvalSettings
    specs: list[EpisodeSpec]
    envs: int
    exact: bool
    options: RayOptions
    failed: list[dict[str, Any]] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)
    tasks: int = 0

    def __iter__(self) -> Iterator[EpisodeResult]:
        ray.init(address=None if self.options.address == LOCAL else self.options.address, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)  # fmt: skip
        try:
            yield from self._run()
        finally:
            ray.shutdown()

    def _shard_count(self) -> int:
        if self.options.shards:
            return self.options.shards
        slots = math.floor(ray.cluster_resources().get("CPU", 1.0) / max(self.options.cpus, 1e-6))
        return max(1, slots)

    def _run(self) -> Iterator[EpisodeResult]:
        task = ray.remote(num_cpus=self.options.cpus, num_gpus=self.options.gpus, max_retries=TASK_RETRIES,
                          retry_exceptions=True)(_run_shard)  # fmt: skip
        shards = split(self.specs, self._shard_count())
        self.tasks = len(shards)
        config = with_absolute_paths(self.config)
        refs = {task.remote(config, self.settings, shard, self.envs, self.exact): shard for shard in shards}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                shard = refs[done[0]]
                try:
                    results, self.config, node = ray.get(done[0])
                except RayError as exc:
                    self.failed.append({"seeds": [s.seed for s in shard], "families": sorted({s.family for s in shard}),
                                        "error": _one_line(exc)})  # fmt: skip
                    continue
                self.nodes.add(node)
                yield from results
        except KeyboardInterrupt:  # Ctrl-C: the cluster stops the tasks still running
            for ref in pending:
                ray.cancel(ref, force=True)
            raise

    def summary(self) -> dict[str, Any]:
        """What the run's summary says of the cluster: its address, tasks, nodes used and failed tasks."""
        return {"address": self.options.address, "tasks": self.tasks, "nodes": len(self.nodes),
                "cpus_per_task": self.options.cpus, "gpus_per_task": self.options.gpus, "failed_tasks": self.failed}  # fmt: skip
