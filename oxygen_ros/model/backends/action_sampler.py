"""Which action backend serves the chunk: the eager network, the compiled one (``compiled``) or the compiled
one replayed from a CUDA graph (``cuda_graphs``). Above both back-ends, so neither imports the other's caller."""

from __future__ import annotations

from collections.abc import Callable

from oxygen_ros.model.backends.compiled import ActionSampler, FusedActionSampler, plain_sampler
from oxygen_ros.model.network.choices import ACTION_BACKENDS as BACKENDS
from oxygen_ros.model.network.vla import Pi05Model


def make_action_sampler(model: Pi05Model, backend: str = "auto",
                        progress: Callable[[str], None] | None = None) -> ActionSampler:
    """``eager``: plain :meth:`Pi05Model.sample_actions`; ``compiled``: the fused network (compiled at once,
    eager fallback with one warning); ``cuda_graph``: the chunk replayed from a CUDA graph of the compiled
    network (CUDA only; of the eager network where compiling fails);
    ``auto``: ``cuda_graph`` on CUDA, ``compiled`` elsewhere."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown action backend {backend!r}; choose one of {BACKENDS}")
    if backend == "auto":
        backend = "cuda_graph" if model.device.type == "cuda" else "compiled"
    if backend == "eager":
        return plain_sampler(model)
    if backend == "cuda_graph":
        if model.device.type != "cuda":
            raise ValueError("the cuda_graph action backend needs a model on a CUDA device")
        from oxygen_ros.model.backends.cuda_graphs import record_action_graph

        return record_action_graph(model, progress)
    sampler = FusedActionSampler(model, progress)
    sampler.warm_up()
    return sampler
