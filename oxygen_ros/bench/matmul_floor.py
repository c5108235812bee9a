"""The floor of a model function on this machine: its matrix products alone, same shapes, dtype and layouts.

``MatmulFloor.capture`` runs one eager call (a prefill; a chunk, plain or guided; a decode step) under a dispatch
mode that records every matrix product (``linear``/``matmul`` as inference mode dispatches them,
``mm``/``addmm``/``bmm`` as autograd does, oneDNN's ``_linear_pointwise`` where a decode step multiplies by
prepacked weights) with its operands' shapes, strides and dtype; ``time_once`` replays them on fresh tensors of
those layouts (a prepacked weight packed afresh), one after the other in the call's order, and returns their
summed wall time. In the eager prefill these are the products of the weights (the vision tower, the projector,
the backbone): its attention is a fused kernel of its own and not among them, so P ÷ this time is what the
prefill spends beyond its linear layers (norms, GELU, RoPE, attention, copies); 1.0 would be a prefill that is
nothing but its linear layers. ``capture(..., attention=True)`` records instead the products inside the fused
attention calls (each call's scores q·kᵀ and weighted values p·v, as the two batched products they amount to).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from oxygen_ros.model.network.packed_decode import pack_weight

# Inference mode hands composite ops (``linear``, ``matmul``) to the recorder whole; autograd decomposes them.
MATMULS = {torch.ops.aten.linear.default, torch.ops.aten.matmul.default, torch.ops.aten.mm.default,
           torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}
# A product with a weight packed for oneDNN (model/network/packed_decode.py): x, packed weight, bias, post-op arguments.
PACKED_LINEAR = torch.ops.mkldnn._linear_pointwise.default if torch.backends.mkldnn.is_available() else None
if PACKED_LINEAR is not None:
    MATMULS.add(PACKED_LINEAR)
# Fused attention (q [..., S, D], k [..., T, D], v [..., T, Dv] first): its scores and values are products too.
ATTENTION = {torch.ops.aten.scaled_dot_product_attention.default,
             torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}


@dataclass(frozen=True)
class Operand:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    packed: bool = False  # a weight in oneDNN's opaque blocked layout

    @classmethod
    def of(cls, t: torch.Tensor) -> "Operand":
        if t.is_mkldnn:
            return cls(tuple(t.shape), (), t.dtype, packed=True)
        return cls(tuple(t.shape), tuple(t.stride()), t.dtype)

    def make(self, device: torch.device) -> torch.Tensor:
        """A tensor of this shape and layout (a transposed weight stays transposed, a packed one is packed)."""
        if self.packed:
            return pack_weight(torch.randn(self.shape, device=device).to(self.dtype))
        size = 1 + sum((n - 1) * s for n, s in zip(self.shape, self.stride))
        return torch.randn(size, device=device).to(self.dtype).as_strided(self.shape, self.stride)


# A recorded call: the op and its positional arguments, each tensor as its Operand, the rest (None, a post-op
# name) as given.
Call = tuple[object, tuple[object, ...]]


def attention_products(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[Call]:
    """The two products of one attention call, batched over its (broadcast) leading dimensions: scores
    [N, S, D] · [N, D, T] and values [N, S, T] · [N, T, Dv], in the inputs' dtype."""
    n = 1
    for size in torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]):
        n *= size
    s, d, t, dv = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    bmm = torch.ops.aten.bmm.default
    key_t = Operand((n, d, t), (t * d, 1, d), k.dtype)  # the keys read transposed, as the kernels read them
    return [(bmm, (Operand((n, s, d), (s * d, d, 1), q.dtype), key_t)),
            (bmm, (Operand((n, s, t), (s * t, t, 1), q.dtype), Operand((n, t, dv), (t * dv, dv, 1), v.dtype)))]


class _Recorder(TorchDispatchMode):
    def __init__(self, attention: bool = False) -> None:
        super().__init__()
        self.attention = attention
        self.calls: list[Call] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if self.attention and func in ATTENTION:
            self.calls += attention_products(*args[:3])
        elif not self.attention and func in MATMULS:
            self.calls.append((func, tuple(Operand.of(a) if isinstance(a, torch.Tensor) else a for a in args)))
        return func(*args, **(kwargs or {}))


class MatmulFloor:
    """The matrix products of one prefill, replayable alone."""

    def __init__(self, calls: list[Call], device: torch.device, made: list[Call] | None = None) -> None:
        self.device = device
        self.count = len(calls)
        self.packed = sum(func is PACKED_LINEAR for func, _ in calls)  # how many multiply by packed weights
        self.flops = sum(_flops(func, tuple(a for a in args if isinstance(a, Operand))) for func, args in calls)
        self._recorded = calls
        self._calls = made if made is not None else [
            (func, tuple(a.make(device) if isinstance(a, Operand) else a for a in args)) for func, args in calls]

    def part(self, keep: Callable[[tuple[object, ...]], bool]) -> "MatmulFloor":
        """The products whose recorded arguments (tensors as :class:`Operand`) ``keep`` selects, replayed on this
        floor's own tensors: timed in the same rounds, a part reads the same memory as the whole does."""
        chosen = [i for i, (_, args) in enumerate(self._recorded) if keep(args)]
        return MatmulFloor([self._recorded[i] for i in chosen], self.device, [self._calls[i] for i in chosen])

    @classmethod
    def capture(cls, prefill: Callable[[], object], device: torch.device, grad: bool = False,
                attention: bool = False) -> "MatmulFloor":
        """The products of one call of ``prefill`` (any model function); ``grad``: run it with autograd on, so
        the products of a backward pass it takes (``torch.autograd.grad``) are recorded too; ``attention``: the
        products inside its fused attention calls instead of the others."""
        recorder = _Recorder(attention)
        with torch.inference_mode(not grad), torch.enable_grad() if grad else torch.no_grad(), recorder:
            prefill()
        return cls(recorder.calls, device)

    @torch.inference_mode()
    def time_once(self) -> float:
        """Seconds for all the products, in the prefill's order (the caller takes a median over rounds)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        for func, args in self._calls:
            func(*args)  # type: ignore[operator]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0


def _flops(func: object, ops: tuple[Operand, ...]) -> int:
    """2·M·N·K of one product: linear(x [..., K], W [N, K], bias?) and its packed form, addmm(bias, a, b),
    mm(a, b), bmm(a, b), matmul(a [..., M, K], b [..., K, N]) with broadcast batch dimensions."""
    if func is torch.ops.aten.linear.default or func is PACKED_LINEAR:
        x, w = ops[0].shape, ops[1].shape
        rows = 1
        for n in x[:-1]:
            rows *= n
        return 2 * rows * w[0] * w[1]
    a, b = ops[-2].shape, ops[-1].shape
    if func is torch.ops.aten.matmul.default:
        batch = 1
        for n in torch.broadcast_shapes(a[:-2], b[:-2]):
            batch *= n
        return 2 * batch * a[-2] * a[-1] * b[-1]
    batch = a[0] if func is torch.ops.aten.bmm.default else 1
    return 2 * batch * a[-2] * a[-1] * b[-1]
