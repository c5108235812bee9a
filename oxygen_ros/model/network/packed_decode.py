"""The decode step's weights prepacked for oneDNN on a CPU.

A decode step multiplies a few rows (one per live request) by every backbone weight and by the text head.
Given a plain ``[out, in]`` bfloat16 weight, oneDNN reorders it into its blocked layout inside every call; at
decode sizes that reorder is a large part of the product. Packing once (``mkldnn._reorder_linear_weight``, a
second copy of the weight) and multiplying with ``mkldnn._linear_pointwise`` gives the same bits at about
0.5x the time at 1-8 rows and 0.7x at 30 (``python -m oxygen_ros.bench.probes.packed_weights``, docs/performance.md).

Only the decode step uses the packed copies (:func:`packed_products` around it): the prefill, the action
chunk and every compiled graph keep the plain weights. Only bfloat16 on a CPU whose oneDNN packs bfloat16
(AVX-512 BW/VL/DQ or AVX-NE-CONVERT; ``cpu_bfloat16.py`` asks it once) is packed: elsewhere the plain
products run. In float32 torch sends the plain product to MKL, which the packed form would not equal.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oxygen_ros.model.network.choices import PACK_CHOICES  # "auto" packs where the copies fit PACK_LIMIT_BYTES
from oxygen_ros.model.network.cpu_bfloat16 import onednn_packs_bfloat16

# A second copy of the decode weights costs memory: at the bench preset 185 MB, for a full pi0.5 about 5 GB
# (its backbone and the 257k-token head). Beyond this the copy is not made (the plain products still run).
PACK_LIMIT_BYTES = 1 << 30

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("oxygen_packed_products", default=False)
# The packed copies, by the module that owns the weight (a PackedLinear, or the model for its text head). Kept
# off the modules: a graph Dynamo compiled before the packing sees the same module and stays valid, and a copy
# of the model (oneDNN's opaque tensors cannot be copied or pickled) starts unpacked.
_PACKED: weakref.WeakKeyDictionary[nn.Module, Tensor] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def packed_products() -> Iterator[None]:
    """Inside this block (on this thread), packed layers and the packed text head multiply by their packed
    copies. The decode step runs in one."""
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def packed_copy(owner: nn.Module, x: Tensor) -> Tensor | None:
    """The packed copy ``owner`` has for a product of ``x``, or None: outside :func:`packed_products`, off the
    CPU, and never while Dynamo traces (graphs keep the plain weight, which they take as an input)."""
    # is_compiling first: Dynamo folds it to True and never reaches the ContextVar, which it cannot trace.
    if torch.compiler.is_compiling() or not _ACTIVE.get() or x.device.type != "cpu":
        return None
    return _PACKED.get(owner)


def is_packed(owner: nn.Module) -> bool:
    return owner in _PACKED


def set_packed(owner: nn.Module, weight: Tensor) -> int:
    """Pack ``weight`` for ``owner``; returns the bytes the copy takes."""
    _PACKED[owner] = pack_weight(weight)
    return weight.numel() * weight.element_size()


def packed_linear(x: Tensor, packed: Tensor, bias: Tensor | None = None) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def pack_weight(weight: Tensor) -> Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` that multiplies by a packed copy of its weight inside :func:`packed_products`, where it
    has one (same parameters, same state dict)."""

    def forward(self, x: Tensor) -> Tensor:
        packed = packed_copy(self, x)
        if packed is not None and x.dtype == self.weight.dtype:
            return packed_linear(x, packed, self.bias)
        return F.linear(x, self.weight, self.bias)


def can_pack(weight: Tensor) -> bool:
    """A bfloat16 weight on a CPU whose oneDNN packs bfloat16 (not on an AVX2-only CPU)."""
    return weight.device.type == "cpu" and weight.dtype == torch.bfloat16 and onednn_packs_bfloat16()


def pack_linears(modules: list[nn.Module]) -> int:
    """Give every :class:`PackedLinear` under ``modules`` a packed copy of its weight; returns the bytes added (0
    where they are packed already). The experts build their products as ``PackedLinear`` from the start, so a
    graph compiled before the packing stays valid (it never reads ``packed``)."""
    return sum(set_packed(m, m.weight) for m in _unpacked(modules))


def linear_bytes(modules: list[nn.Module]) -> int:
    """Bytes of the unpacked, packable weights under ``modules`` (what :func:`pack_linears` would add)."""
    return sum(m.weight.numel() * m.weight.element_size() for m in _unpacked(modules))


def _unpacked(modules: list[nn.Module]) -> list[PackedLinear]:
    return [m for root in modules for m in root.modules()
            if isinstance(m, PackedLinear) and not is_packed(m) and can_pack(m.weight)]
