"""Building a model on the meta device without filling its parameters (the checkpoint's tensors replace them)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

_INIT_FUNCTIONS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
                   "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_")
_INIT_LOCK = threading.Lock()


@contextlib.contextmanager
def no_random_init() -> Iterator[None]:
    """torch.nn.init's fills as no-ops while the model is built on the meta device: the checkpoint's tensors replace
    every parameter, and a fill of a meta tensor runs through torch._refs, whose first use imports torch._dynamo
    (seconds of start-up in a process that never compiles)."""
    with _INIT_LOCK:
        saved = {name: getattr(torch.nn.init, name) for name in _INIT_FUNCTIONS if hasattr(torch.nn.init, name)}
        for name in saved:
            setattr(torch.nn.init, name, _keep)
        try:
            yield
        finally:
            for name, fn in saved.items():
                setattr(torch.nn.init, name, fn)


def _keep(tensor: torch.Tensor, *_: object, **__: object) -> torch.Tensor:
    return tensor
