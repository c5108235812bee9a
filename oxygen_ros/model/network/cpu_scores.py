"""Float32 attention scores of bfloat16 queries and keys on a CPU, from oneDNN's float32 matrix product.

torch sends a float32 ``matmul`` to MKL, which on this AMD CPU runs about 2.5x slower than oneDNN: a backbone
layer's scores at the bench preset (4096 x 32 against 525 x 32, one thread, 2-core AMD EPYC with AVX512-BF16)
take 1.5-1.6 ms in MKL and 0.61-0.65 ms in oneDNN. In the compiled layer, where the scores then leave the
cache, the attention went from 3.1-3.3 to 2.4-2.5 ms (docs/performance.md, "The prefill against its floor").
With both libraries held to AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2``, as on a CPU without
AVX-512) oneDNN still took 1.14 ms against MKL's 1.45-1.47 ms.

oneDNN's linear is reachable as ``mkldnn::_linear_pointwise`` on plain tensors, but inductor lowers that op only
for prepacked constant weights (here the "weight" is the keys), so it is wrapped in a custom op that inductor
calls as it is. With q and k in bfloat16 each product is exact in float32 and the sums are float32, as in the
fused attention kernel and the MKL product this replaces.
"""

from __future__ import annotations

import torch
from torch import Tensor

ONEDNN = torch.backends.mkldnn.is_available()  # read once: Dynamo does not trace into torch.backends


@torch.library.custom_op("oxygen_ros::float32_scores", mutates_args=())
def float32_scores(q: Tensor, k: Tensor) -> Tensor:
    """q [..., S, D] · k [..., T, D]ᵀ → float32 [..., S, T], the leading dimensions broadcast.

    One oneDNN product per leading index (its linear takes two-dimensional operands); a single one (a frame's
    prefill, whose query heads are folded into rows) is returned as it is, several are gathered into one
    tensor."""
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    s, t = q.shape[-2], k.shape[-2]
    qf = q.float().expand(*lead, *q.shape[-2:]).reshape(-1, s, q.shape[-1])
    kf = k.float().expand(*lead, *k.shape[-2:]).reshape(-1, t, k.shape[-1])
    if qf.shape[0] == 1:
        return _linear(qf[0], kf[0]).view(*lead, s, t)
    out = torch.empty(qf.shape[0], s, t, dtype=torch.float32, device=q.device)
    for i in range(qf.shape[0]):
        out[i] = _linear(qf[i], kf[i])
    return out.view(*lead, s, t)


@float32_scores.register_fake
def _(q: Tensor, k: Tensor) -> Tensor:
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    return q.new_empty(*lead, q.shape[-2], k.shape[-2], dtype=torch.float32)


def _linear(x: Tensor, w: Tensor) -> Tensor:
    """x [S, D] · w [T, D]ᵀ in oneDNN, float32."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), w.contiguous(), None, "none", [], "")
