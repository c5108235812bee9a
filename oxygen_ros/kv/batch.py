"""Index plan for one batched model call over text requests (built once, used by every layer).

Row ``b`` of a plan reads its context from pool slots ``ctx_index[b, :ctx_len[b]]``: the prefix slots,
then the request's own slots up to and including the ``S`` new tokens. The new tokens' K/V must be
written to ``write_index`` before the context is gathered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from oxygen_ros.kv.request import TextRequest


@dataclass
class BatchPlan:
    """Slots and positions of a batched call: ``B`` requests, ``S`` new tokens each, context width ``T``."""

    ctx_index: torch.Tensor  # [B, T] pool slots, right-padded with slot 0
    ctx_len: torch.Tensor  # [B] valid context length, new tokens included
    write_index: torch.Tensor  # [B, S] pool slots of the new tokens' K/V
    positions: torch.Tensor  # [B, S] RoPE positions of the new tokens
    tokens: torch.Tensor | None = None  # [B, S] token ids to feed

    def key_mask(self) -> torch.Tensor:
        """Bool ``[B, S, T]``: True where new token ``s`` may attend to context column ``t`` (causal)."""
        s_len, t_len = self.write_index.shape[1], self.ctx_index.shape[1]
        s = torch.arange(s_len, device=self.ctx_len.device)
        t = torch.arange(t_len, device=self.ctx_len.device)
        limit = self.ctx_len[:, None] - s_len + 1 + s[None, :]  # [B, S]: keys visible to each new token
        return t[None, None, :] < limit[:, :, None]


def _plan(requests: Sequence[TextRequest], n_new: int, rows: list[list[int]], device) -> BatchPlan:
    if not requests:
        raise ValueError("batch plan: no requests")
    for r in requests:
        if r.finished:
            raise ValueError(f"batch plan: request {r.id} ({r.task}) is finished")
        if r.own_len + n_new > r.extent.length:
            raise ValueError(f"batch plan: request {r.id} ({r.task}) has {r.extent.length - r.own_len} free "
                             f"slots in its extent, {n_new} needed")
    # One small CPU tensor per per-request quantity; the token loop is vectorized.
    p_start = torch.tensor([r.prefix.extent.start for r in requests], dtype=torch.long)[:, None]
    p_len = torch.tensor([r.prefix.length for r in requests], dtype=torch.long)[:, None]
    o_start = torch.tensor([r.extent.start for r in requests], dtype=torch.long)[:, None]
    own = torch.tensor([r.own_len for r in requests], dtype=torch.long)[:, None]
    ctx_len = (p_len + own + n_new)[:, 0]
    j = torch.arange(int(ctx_len.max()), dtype=torch.long)[None, :]
    ctx_index = torch.where(j < p_len, p_start + j, o_start + j - p_len)
    ctx_index = ctx_index.masked_fill(j >= ctx_len[:, None], 0)
    s = torch.arange(n_new, dtype=torch.long)[None, :]
    write_index = o_start + own + s
    positions = p_len + own + s
    tokens = torch.tensor(rows, dtype=torch.long)
    return BatchPlan(*(t.to(device) for t in (ctx_index, ctx_len, write_index, positions, tokens)))


def plan_decode(requests: Sequence[TextRequest], device: torch.device | str = "cpu") -> BatchPlan:
    """One decode step: each request feeds its ``pending_token`` at ``next_position``."""
    for r in requests:
        if r.pending_token is None:
            raise ValueError(f"plan_decode: request {r.id} ({r.task}) has no pending token")
    return _plan(requests, 1, [[r.pending_token] for r in requests], device)


def plan_extend(request: TextRequest, n_new: int, device: torch.device | str = "cpu") -> BatchPlan:
    """Feed the next ``n_new`` not-yet-fed tokens of one request (normally its continuation prompt)."""
    fed = request.fed_tokens
    if n_new <= 0 or request.own_len + n_new > len(fed):
        raise ValueError(f"plan_extend: request {request.id} ({request.task}) has "
                         f"{len(fed) - request.own_len} unfed tokens, asked for n_new={n_new}")
    return _plan([request], n_new, [fed[request.own_len:request.own_len + n_new]], device)


def commit(requests: Sequence[TextRequest], n_new: int) -> None:
    """After the model call: the ``n_new`` tokens of each request are now in its KV."""
    for r in requests:
        if r.own_len + n_new > r.extent.length:
            raise ValueError(f"commit: request {r.id} ({r.task}) would exceed its extent of {r.extent.length}")
        r.own_len += n_new
