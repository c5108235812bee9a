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
with its seeds; its episodes are not counted as run (`oxygen_ros.cluster.tasks`). This module is imported
only with ``--ray``: the rest of the package imports nothing of Ray.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from oxygen_ros.cluster.tasks import RayOptions, TaskFailure, connected, node_id, run_tasks, task_slots
from oxygen_ros.runtime import RuntimeConfig
from oxygen_ros.runtime.paths import with_absolute_paths

from .episode import EpisodeSpec
from .evaluate import EpisodeResult, EvalSettings, evaluate

__all__ = ["RayEvaluation", "RayOptions", "split"]


def _run_shard(config: RuntimeConfig, settings: EvalSettings, specs: list[EpisodeSpec], envs: int,
               exact: bool) -> tuple[list[EpisodeResult], RuntimeConfig, str]:  # fmt: skip
    """One task: load the engine, run the shard's episodes; their results, the loaded configuration and the
    node that ran them."""
    from oxygen_ros.runtime import PolicyRuntime

    runtime = PolicyRuntime.load(config)
    results = list(evaluate(runtime, specs, settings, min(envs, len(specs)), exact))
    return results, runtime.config, node_id()


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
        with connected(self.options):
            shards = split(self.specs, self.options.shards or task_slots(self.options))
            self.tasks = len(shards)
            config = with_absolute_paths(self.config)
            calls = [(i, (config, self.settings, shard, self.envs, self.exact)) for i, shard in enumerate(shards)]
            for i, outcome in run_tasks(_run_shard, calls, self.options):
                if isinstance(outcome, TaskFailure):
                    self.failed.append({"seeds": [s.seed for s in shards[i]], "families": sorted({s.family for s in shards[i]}),
                                        "error": outcome.error})  # fmt: skip
                    continue
                results, self.config, node = outcome
                self.nodes.add(node)
                yield from results

    def summary(self) -> dict[str, Any]:
        """What the run's summary says of the cluster: its address, tasks, nodes used and failed tasks."""
        return self.options.summary(self.tasks, self.nodes, self.failed)
