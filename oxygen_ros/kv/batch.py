"""Index plan for one batched model call over text requests (built once, used by every layer).

Every token fed in a step is its own row (S = 1): a new request contributes one row per continuation-prompt
token, a decoding request one row for its pending token. Row ``r`` reads its context from pool slots
``ctx_index[r, :ctx_len[r]]`` — the request's prefix slots, then its own slots up to and including this
token — so tokens of one request see each other causally, and requests of any frame and any length share
one call. The new tokens' K/V are written to ``write_index`` before the context is gathered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from oxygen_ros.kv.request import TextRequest


@dataclass
class BatchPlan:
    """Slots and positions of a batched call: ``R`` rows of one new token each, context width ``T``."""

    ctx_index: torch.Tensor  # [R, T] pool slots, right-padded with slot 0
    ctx_len: torch.Tensor  # [R] valid context length, the row's own token included
    write_index: torch.Tensor  # [R, 1] pool slot of the row's K/V
    positions: torch.Tensor  # [R, 1] RoPE position of the row's token
    tokens: torch.Tensor  # [R, 1] token ids to feed
    last_rows: torch.Tensor  # [len(requests)] row of each request's last token (its next-token logits)


def unfed_tokens(request: TextRequest) -> list[int]:
    """Tokens of a request not yet in its KV: the continuation prompt at first, then the pending token."""
    return request.fed_tokens[request.own_len:]


def plan_step(requests: Sequence[TextRequest], device: torch.device | str = "cpu") -> BatchPlan:
    """One batched step feeding every unfed token of every request."""
    if not requests:
        raise ValueError("batch plan: no requests")
    feeds = [unfed_tokens(r) for r in requests]
    for r, feed in zip(requests, feeds):
        if r.finished:
            raise ValueError(f"batch plan: request {r.id} ({r.task}) is finished")
        if not feed:
            raise ValueError(f"batch plan: request {r.id} ({r.task}) has no unfed token")
        if r.own_len + len(feed) > r.extent.length:
            raise ValueError(f"batch plan: request {r.id} ({r.task}) has {r.extent.length - r.own_len} free "
                             f"slots in its extent, {len(feed)} needed")
    counts = torch.tensor([len(f) for f in feeds], dtype=torch.long)

    def per_row(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long).repeat_interleave(counts)[:, None]

    p_start = per_row([r.prefix.extent.start for r in requests])
    p_len = per_row([r.prefix.length for r in requests])
    o_start = per_row([r.extent.start for r in requests])
    # Index of each row within its request: 0..n-1, built without a Python loop over tokens.
    ends = counts.cumsum(0)
    within = torch.arange(int(ends[-1])) - (ends - counts).repeat_interleave(counts)
    own = per_row([r.own_len for r in requests]) + within[:, None]  # own slots before this row's token
    ctx_len = (p_len + own + 1)[:, 0]
    j = torch.arange(int(ctx_len.max()), dtype=torch.long)[None, :]
    ctx_index = torch.where(j < p_len, p_start + j, o_start + j - p_len).masked_fill(j >= ctx_len[:, None], 0)
    tokens = torch.tensor([t for feed in feeds for t in feed], dtype=torch.long)[:, None]
    plan = (ctx_index, ctx_len, o_start + own, p_len + own, tokens, ends - 1)
    return BatchPlan(*(t.to(device) for t in plan))


def commit(requests: Sequence[TextRequest]) -> None:
    """After the model call: every unfed token of each request is now in its KV."""
    for r in requests:
        r.own_len = len(r.fed_tokens)
        if r.own_len > r.extent.length:
            raise ValueError(f"commit: request {r.id} ({r.task}) exceeds its extent of {r.extent.length}")
