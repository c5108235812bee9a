"""One training batch laid out as a single joint sequence per sample, and its attention mask.

Per sample: [image tokens][prompt (padded)][task 1 continuation + text][task 2 ...](padded) | K x [H action tokens].
The prefix (images + prompt) is computed once and every consumer attends to it, as at inference:

* each text task sees the prefix and its own tokens causally (never another task's), its positions start
  right after the prefix, as a request forked from the frame's cached prefix;
* the action tokens see the prefix and the other tokens of their own group, positions after the prefix (as
  ``sample_actions``); the K groups are K independent noise draws of the flow-matching loss sharing one prefix
  (the prefix is most of the compute, so extra draws are cheap);
* the prefix never sees text or action tokens; prompt tokens are causal for ``causal_text`` (OxyGen).

Padding tokens see only themselves (so no softmax row is empty) and nobody sees them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from .data import TrainingSet, pixels_from_uint8
from .grounding import IGNORE  # also the label of positions without a text target

# Token kinds in the joint sequence.
IMAGE, PROMPT, ACTION, PAD = 0, 1, 2, 3
FIRST_TASK = 4  # task k has kind FIRST_TASK + k


@dataclass
class Batch:
    images: Tensor  # float32 [B * V, 3, S, S] valid slots, sample-major (the order prefill uses)
    tokens: Tensor  # long [B, T]: prompt and text token ids of the backbone stream (after the image tokens)
    labels: Tensor  # long [B, T]: next-token targets on text positions, IGNORE elsewhere
    kinds: Tensor  # long [B, I + T + H]: token kind of the whole joint sequence
    positions: Tensor  # long [B, I + T + H]: RoPE positions
    actions: Tensor  # float32 [B, H, A] normalized target chunks
    num_image_tokens: int
    flow_samples: int = 1  # K: action-token groups after the prefix, one noise draw each
    target_maps: Tensor | None = None  # float [B, V, P]: per image, where the named object is (data.target_map)
    object_labels: Tensor | None = None  # long [B, V, P]: per image, the objects its patches show (data.object_labels)
    read_maps: Tensor | None = None  # float [B, K, READS, V·P + 1]: per text task, the objects it looks at (data.read_maps)
    read_rows: Tensor | None = None  # long [B, K]: joint-sequence index of each task's last prompt token (-1: none)
    # long [B, K]: how many positions from read_rows on predict a token of the task's text (EOS aside)
    read_spans: Tensor | None = None

    @property
    def size(self) -> int:
        return self.actions.shape[0]


@dataclass(frozen=True)
class TextLayout:
    """One sample's text streams end to end, as every batch places them after its padded prompt: per task
    with a text, its continuation prompt then the text minus its last token (EOS)."""

    tokens: Tensor  # long [n]
    labels: Tensor  # long [n]: the last continuation token predicts the first text token, and so on up to EOS
    kinds: Tensor  # long [n]: FIRST_TASK + k
    offsets: Tensor  # long [n]: position after the prefix (each task starts right after it, a forked request)
    rows: Tensor  # long [K]: index in the streams of each task's last continuation token (-1: no text)
    spans: Tensor  # long [K]: positions from that row on that predict a token of the text (EOS aside), at least 1


def text_layout(data: TrainingSet, sample: int) -> TextLayout:
    """The layout of ``sample``'s text streams, computed once per training set."""
    layout = data.layouts.get(sample)
    if layout is None:
        tasks = len(data.continuations)
        parts: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []
        rows = torch.full((tasks,), -1, dtype=torch.long)
        spans = torch.zeros(tasks, dtype=torch.long)
        at = 0
        for k, target in enumerate(data.texts[sample]):
            if not target.numel():  # no such text in this sample (an unasked question)
                continue
            cont = data.continuation(sample, k)
            n = cont.numel() + target.numel() - 1
            labels = torch.cat((torch.full((cont.numel() - 1,), IGNORE, dtype=torch.long), target))
            parts.append((torch.cat((cont, target[:-1])), labels, torch.full((n,), FIRST_TASK + k), torch.arange(n)))
            rows[k] = at + cont.numel() - 1
            spans[k] = max(target.numel() - 1, 1)
            at += n
        empty = torch.zeros(0, dtype=torch.long)
        columns = [torch.cat(column) for column in zip(*parts)] if parts else [empty] * 4
        layout = TextLayout(*columns, rows, spans)
        data.layouts[sample] = layout
    return layout


def make_batch(data: TrainingSet, index: Tensor, tokens_per_image: int, pad_id: int, flow_samples: int = 1) -> Batch:
    """Collate the samples ``index`` of ``data`` into one joint sequence each, with ``flow_samples`` action groups."""
    if flow_samples < 1:
        raise ValueError("flow_samples must be >= 1")
    b = index.numel()
    n_img = int(data.image_slots.sum()) * tokens_per_image
    horizon = data.actions.shape[1]
    samples = index.tolist()
    prompts = [data.prompts[i] for i in samples]
    layouts = [text_layout(data, i) for i in samples]
    prompt_len = torch.tensor([p.numel() for p in prompts])
    p_max = int(prompt_len.max())
    in_prompt = torch.arange(p_max) < prompt_len.unsqueeze(1)
    prefix_len = (n_img + prompt_len).unsqueeze(1)
    stream_kinds = pad_sequence([t.kinds for t in layouts], batch_first=True, padding_value=PAD)
    stream_positions = torch.where(stream_kinds == PAD, 0, prefix_len + pad_sequence([t.offsets for t in layouts], batch_first=True))
    prompt_tokens = pad_sequence(prompts, batch_first=True, padding_value=pad_id)
    tokens = torch.cat((prompt_tokens, pad_sequence([t.tokens for t in layouts], batch_first=True, padding_value=pad_id)), 1)
    stream_labels = pad_sequence([t.labels for t in layouts], batch_first=True, padding_value=IGNORE)
    labels = torch.cat((torch.full((b, p_max), IGNORE, dtype=torch.long), stream_labels), 1)
    kinds = torch.cat((
        torch.full((b, n_img), IMAGE, dtype=torch.long),
        torch.where(in_prompt, PROMPT, PAD),
        stream_kinds,
        torch.full((b, horizon * flow_samples), ACTION, dtype=torch.long),
    ), 1)  # fmt: skip
    positions = torch.cat((
        torch.arange(n_img).expand(b, n_img),
        torch.where(in_prompt, n_img + torch.arange(p_max), 0),
        stream_positions,
        prefix_len + torch.arange(horizon).repeat(flow_samples),
    ), 1)  # fmt: skip
    rows = torch.stack([t.rows for t in layouts])
    rows = torch.where(rows >= 0, rows + n_img + p_max, -1)
    spans = torch.stack([t.spans for t in layouts])
    images = pixels_from_uint8(data.pixels[data.image_index[index]].flatten(0, 1))
    targets = data.target_maps[index] if data.target_maps is not None else None
    objects = data.object_labels[index] if data.object_labels is not None else None
    reads = data.read_maps[index] if data.read_maps is not None else None
    return Batch(images, tokens, labels, kinds, positions, data.actions[index], n_img, flow_samples, targets, objects,
                 reads, rows if reads is not None else None, spans if reads is not None else None)  # fmt: skip


def action_groups(batch: Batch) -> Tensor:
    """long [L]: the flow-sample group of each position of the joint sequence (-1 outside the action tokens)."""
    length = batch.kinds.shape[1]
    horizon = batch.actions.shape[1]
    groups = torch.full((length,), -1, dtype=torch.long)
    groups[length - horizon * batch.flow_samples :] = torch.arange(batch.flow_samples).repeat_interleave(horizon)
    return groups


def attention_mask(kinds: Tensor, positions: Tensor, causal_prompt: bool, groups: Tensor | None = None) -> Tensor:
    """bool [B, L, L] (True = query may attend to key) for the layout described in the module docstring;
    ``groups`` [L] (see ``action_groups``) keeps each flow sample's action tokens to themselves."""
    q_kind, k_kind = kinds.unsqueeze(2), kinds.unsqueeze(1)
    q_pos, k_pos = positions.unsqueeze(2), positions.unsqueeze(1)
    key_prefix = (k_kind == IMAGE) | (k_kind == PROMPT)
    q_prefix = (q_kind == IMAGE) | (q_kind == PROMPT)
    if causal_prompt:
        # Images see images; a prompt token sees the images and the prompt up to itself.
        prefix_rows = (k_kind == IMAGE) | ((q_kind == PROMPT) & (k_kind == PROMPT) & (k_pos <= q_pos))
    else:
        prefix_rows = key_prefix
    consumers = (q_kind == ACTION) | (q_kind >= FIRST_TASK)
    mask = (q_prefix & prefix_rows) | (consumers & key_prefix)
    same_group = True if groups is None else (groups.view(1, -1, 1) == groups.view(1, 1, -1))
    mask |= (q_kind == ACTION) & (k_kind == ACTION) & same_group
    mask |= (q_kind >= FIRST_TASK) & (k_kind == q_kind) & (k_pos <= q_pos)
    length = kinds.shape[1]
    eye = torch.eye(length, dtype=torch.bool).unsqueeze(0)
    return mask | ((q_kind == PAD) & eye)
