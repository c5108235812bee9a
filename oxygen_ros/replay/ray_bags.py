"""``oxygen-replay eval BAG... --ray``: one Ray task per bag, each loading one engine and judging its bag as
one machine does (`bags_eval.judge_bag`); the outcomes come back as the tasks return.

What travels: the parameters (read once, model paths made absolute) and the evaluation options go in each
task's arguments (Ray's object store); each task reads its bag, the checkpoint and the tokenizer from their
paths, which every node must see (a shared path, or the same files at the same path). A bag's own problems
(`EvalError`, `BagError`) come back as its error, not retried; a task that raises anything else, or whose
worker dies, is retried once, then named (`oxygen_ros.cluster.tasks`). Imported only with ``--ray``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from oxygen_ros.cluster.tasks import RayOptions, TaskFailure, connected, node_id, run_tasks
from oxygen_ros.runtime.paths import with_absolute_paths

from .bags_eval import BagOutcome, judge_bag
from .config import ReplayConfig
from .evaluate import EvalOptions


def _judge_on_node(bag: str, config: ReplayConfig, options: EvalOptions) -> BagOutcome:
    outcome = judge_bag(bag, config, options)
    outcome.node = node_id()
    return outcome


@dataclass
class RayBags:
    """Iterating runs one task per bag and yields each bag's outcome as its task returns (a task that failed
    twice as an outcome with its error, counted in ``failed_tasks``)."""

    bags: Sequence[str]
    config: ReplayConfig
    options: EvalOptions
    ray: RayOptions
    nodes: set[str] = field(default_factory=set)
    failed_tasks: int = 0

    def __iter__(self) -> Iterator[BagOutcome]:
        config = dataclasses.replace(self.config, runtime=with_absolute_paths(self.config.runtime))
        with connected(self.ray):
            calls = [(bag, (bag, config, self.options)) for bag in self.bags]
            for bag, outcome in run_tasks(_judge_on_node, calls, self.ray):
                if isinstance(outcome, TaskFailure):
                    self.failed_tasks += 1
                    yield BagOutcome(bag, error=f"a Ray task failed twice: {outcome.error}")
                    continue
                self.nodes.add(outcome.node or "")
                yield outcome

    def summary(self) -> dict[str, object]:
        """What the report says of the cluster: its address, tasks, nodes used and tasks that failed twice."""
        return self.ray.summary(len(self.bags), self.nodes, self.failed_tasks)
