"""The pointing loss: a text task's attention looks at the object its text is about.

A question ("what is left of the blue cup?") is asked after the frame's shared prefix, so the image tokens
never see it: unlike the instruction's object, which the bidirectional prefix marks in the images (and the
grounding loss trains), the question's object has to be found by the question's own attention, and the
answer's object by a second look from there. Behaviour cloning alone never found either (answers to "where"
near chance, "left of" / "right of" almost always "nothing"), since neither look has a gradient of its own
before the other works. This loss gives each look one: at every position that predicts a token of the
text (the task's last prompt token, then each token of the text but the last, as teacher forcing feeds
them), one attention head of a backbone layer is trained, per read, to put its weight on the patches that
show the object (``text_uvs``, spread bilinearly over the nearest patch centres like the grounding
labels): the first read in the middle layer, the second in the last. A look that finds no object (a
question about an object the scene lacks, nothing beside the one asked about) is trained to put its weight
on no image: on the text it can see (``ELSEWHERE``), so "not here" and "nothing" have a look of their own
to follow. Every position looks, not only the first: "far left" is two tokens, and with only the first
position's look trained, a checkpoint's looks found the object's patch 97 % of the time and its answers
named the row, but the column (predicted one position later, by an untrained look) at chance. The loss
supervises the served model's own attention (the same weights, the same RoPE positions and keys as at
inference), so nothing is added to the checkpoint.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from oxygen_ros.model.network.layers import apply_rope
from oxygen_ros.model.network.mot import MoTLayer

from .grounding import default_layer

READS = 2  # looks per text task: the object it is about, then the object its text names
# A read map's last entry: the weight of "no image" (the look finds no object and rests on the text tokens
# it sees); the entries before it are the image tokens'.
ELSEWHERE = -1
HEAD = 0  # the query head that is trained to point (the other heads stay free)


def default_layers(depth: int) -> tuple[int, ...]:
    """The backbone layers of the two reads: the middle one, then the last."""
    return default_layer(depth), depth - 1


def pointing_loss(
    layer: MoTLayer, x: Tensor, cos: Tensor, sin: Tensor, visible: Tensor, samples: Tensor, rows: Tensor, maps: Tensor,
) -> Tensor:
    """Cross-entropy of head ``HEAD``'s attention at ``layer``, whose backbone input is ``x`` [B, T, W], from
    the query tokens ``rows`` [n] of samples ``samples`` [n], against ``maps`` [n, I + 1] (the target
    distribution over the first I tokens, the image tokens, and, last, over the rest the query sees: all
    its weight off the images counts as one outcome). ``visible`` [n, T] is each query's row of the joint
    attention mask over the backbone tokens (its prefix and its own text), so the probabilities are exactly
    the served attention's; cos/sin [B, L, D] are the joint sequence's RoPE tables."""
    block = layer.vlm
    proj = block.self_attn
    d, group = proj.head_dim, proj.num_heads // proj.num_kv_heads
    t = visible.shape[1]
    h, _ = block.input_layernorm(x[:, :t], None)
    k = proj.k_proj(h).view(*h.shape[:2], proj.num_kv_heads, d)[:, :, HEAD // group : HEAD // group + 1]
    k = apply_rope(k, cos[:, :t], sin[:, :t])[:, :, 0]  # [B, T, D]
    hq, _ = block.input_layernorm(x[samples, rows], None)  # [n, W]
    q = proj.q_proj(hq).view(-1, 1, proj.num_heads, d)[:, :, HEAD : HEAD + 1]
    q = apply_rope(q, cos[samples, rows].unsqueeze(1), sin[samples, rows].unsqueeze(1))[:, 0, 0]  # [n, D]
    scores = torch.einsum("nd,ntd->nt", q.float(), k[samples].float()) / math.sqrt(d)
    log_probs = F.log_softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    images = maps.shape[1] - 1  # the map's last entry is ELSEWHERE
    # the query always sees itself, so the weight off the images is never 0 and its log is finite
    elsewhere = torch.logsumexp(log_probs[:, images:], dim=-1, keepdim=True)
    log_probs = torch.cat((log_probs[:, :images], elsewhere), dim=-1)
    target = maps / maps.sum(-1, keepdim=True)
    return -(target * log_probs).sum(-1).mean()


def read_targets(maps: Tensor, rows: Tensor, spans: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Per read, the (samples, query rows, target maps [n, V·P + 1]) of the text tasks whose look has a target
    (an object, or ELSEWHERE), one entry per position that predicts a token of the text: ``maps`` [B, K,
    READS, V·P + 1], ``rows`` [B, K] (the joint-sequence index of each task's last prompt token, -1 where the
    sample has no such text) and ``spans`` [B, K] (how many positions from there on predict its tokens)."""
    out = []
    for hop in range(maps.shape[2]):
        flat = maps[:, :, hop]  # [B, K, V·P + 1]
        has = (flat.sum(-1) > 0) & (rows >= 0)
        samples, tasks = has.nonzero(as_tuple=True)
        counts = spans[samples, tasks]
        # the i-th token's position is the first row + i: repeat each (sample, task) once per position
        offsets = torch.arange(int(counts.sum())) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
        out.append((samples.repeat_interleave(counts), rows[samples, tasks].repeat_interleave(counts) + offsets,
                    flat[samples, tasks].repeat_interleave(counts, dim=0)))
    return out
