"""The training forward: one joint pass of both experts over a batch, and the two losses.

Built only from the inference model's own modules (vision tower, projector, embeddings, MoT blocks, norms,
action projections, time MLP), in the same order as ``Pi05Model.prefill`` / ``extend`` / ``sample_actions``,
so training and inference share weights and math. Losses (openpi π0/π0.5 and OxyGen):

* flow matching: t ~ Beta(1.5, 1)·0.999 + 0.001, x_t = t·noise + (1 − t)·actions, target u = noise − actions,
  MSE against the action expert's velocity;
* next-token cross-entropy on each text task's target after its continuation prompt, averaged per task and
  then over the tasks;
* optionally the grounding and recognition losses (``grounding.py``): training-only heads point, in every
  camera image, at the patches that show the named object (read after a middle backbone layer), and name the
  object each patch shows (read where the image features enter the backbone);
* optionally the pointing loss (``pointing.py``): a text task's own attention looks at the objects its text
  is about (the question's object, then the answer's; the memory note's neighbour).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from oxygen_ros.model.network.vla import Pi05Model

from .batch import FIRST_TASK, IGNORE, Batch, action_groups, attention_mask
from .grounding import PatchHeads, grounding_loss, recognition_loss
from .pointing import pointing_loss, read_targets


@dataclass
class Losses:
    total: Tensor
    flow: Tensor  # MSE of the velocity
    text: Tensor  # mean next-token cross-entropy over all text targets
    per_task: Tensor | None = None  # [tasks] each task's mean cross-entropy (detached; NaN: no tokens in the batch)
    grounding: Tensor | None = None  # the grounding head's pointing cross-entropy (None: no head)
    recognition: Tensor | None = None  # the recognition head's cross-entropy over object names (None: no head)
    pointing: Tensor | None = None  # the text tasks' attention cross-entropy against their objects (None: off)


def sample_flow_time(batch: int, generator: torch.Generator) -> Tensor:
    """openpi's flow-time distribution: Beta(1.5, 1) scaled into [0.001, 1] (more weight near noise)."""
    # Beta(a, 1) is U^(1/a): sampled from the seeded generator, so training is deterministic.
    u = torch.rand(batch, generator=generator, dtype=torch.float64)
    return (u ** (1.0 / 1.5) * 0.999 + 0.001).to(torch.float32)


def _modulations(model: Pi05Model, times: Tensor) -> tuple[list[tuple[Tensor, Tensor]], Tensor]:
    """Per layer (input, post-attention) modulations and the final norm's, each [B, 3W], for times [B]."""
    cond = model._time_condition(times)
    per_layer = []
    for layer in model.layers:
        first, second = layer.action.adaptive_norms()
        per_layer.append((first.dense(cond), second.dense(cond)))
    return per_layer, model.action_norm.dense(cond)


def joint_forward(model: Pi05Model, batch: Batch, x_t: Tensor, times: Tensor) -> tuple[Tensor, Tensor]:
    """Both experts over the whole joint sequence → (text hidden [B, T, Wb] final-normed, velocity [B, K·H, A]);
    x_t [B, K·H, A] holds the K flow samples' noisy chunks, all at the sample's time ``times`` [B]."""
    text_hidden, velocity, _, _ = _joint_pass(model, batch, x_t, times, ())
    return text_hidden, velocity


Reads = dict[int, list[tuple[Tensor, Tensor, Tensor]]]  # backbone layer -> its reads' (samples, query rows, target maps)


def _joint_pass(
    model: Pi05Model, batch: Batch, x_t: Tensor, times: Tensor, tap_layers: tuple[int, ...], reads: Reads | None = None,
) -> tuple[Tensor, Tensor, dict[int, Tensor], list[Tensor]]:
    """``joint_forward`` plus, per layer of ``tap_layers``, the images' patch tokens [B, V, P, Wb] as that
    backbone layer outputs them (-1: as they enter the backbone), and per layer of ``reads`` with targets the
    pointing loss of its attention (``pointing.pointing_loss``)."""
    cfg = model.config
    b = batch.size
    feats = model.multi_modal_projector(model.vision_tower(batch.images.to(model.dtype)))
    xb = torch.cat((feats.reshape(b, -1, feats.shape[-1]), model.embed_text(batch.tokens)), dim=1)
    xa = model.action_in_proj(x_t.to(model.dtype))
    mask = attention_mask(batch.kinds, batch.positions, cfg.prefix_attention == "causal_text", action_groups(batch))
    cos, sin = model.rope.cos_sin(batch.positions, model.dtype)
    layer_mods, final_mod = _modulations(model, times)

    def patches(x: Tensor) -> Tensor:
        return x[:, : batch.num_image_tokens].reshape(b, -1, cfg.tokens_per_image, x.shape[-1])

    tapped = {-1: patches(xb)} if -1 in tap_layers else {}
    pointed = []
    for i, (layer, mods) in enumerate(zip(model.layers, layer_mods)):
        for samples, rows, maps in (reads or {}).get(i, []):
            if samples.numel():
                visible = mask[samples, rows, : xb.shape[1]]  # each query's own row of the joint attention
                pointed.append(pointing_loss(layer, xb, cos, sin, visible, samples, rows, maps))
        xb, xa = layer.joint(xb, xa, mods, cos, sin, mask)
        if i in tap_layers:
            tapped[i] = patches(xb)
    text_hidden, _ = model.norm(xb[:, batch.num_image_tokens :])
    xa, _ = model.action_norm(xa, final_mod)
    return text_hidden, model.action_out_proj(xa).float(), tapped, pointed


def compute_losses(
    model: Pi05Model, batch: Batch, generator: torch.Generator, text_weight: float = 1.0, flow_weight: float = 1.0,
    heads: PatchHeads | None = None,
) -> Losses:
    """Both losses from one joint forward (the prefix is computed once and shared by them and by the batch's
    K flow samples: K noise draws per sample at one flow time, since the time conditions the whole action stream);
    with ``heads`` and the batch's target maps / object labels / read maps, the grounding / recognition /
    pointing losses too."""
    actions = batch.actions.repeat(1, batch.flow_samples, 1)
    noise = torch.randn(actions.shape, generator=generator)
    times = sample_flow_time(batch.size, generator)
    t = times.view(-1, 1, 1)
    x_t = t * noise + (1.0 - t) * actions
    target = noise - actions
    point_head = heads.grounding if heads is not None and heads.grounding_weight and batch.target_maps is not None else None
    name_head = heads.recognition if heads is not None and heads.recognition_weight and batch.object_labels is not None else None
    taps = ((heads.layer,) if point_head else ()) + ((heads.recognition_layer,) if name_head else ())  # type: ignore[union-attr]
    reads: Reads = {}
    if heads is not None and heads.pointing_weight and batch.read_maps is not None and batch.read_rows is not None \
            and batch.read_spans is not None:  # fmt: skip
        for layer, targets in zip(heads.pointing_layers, read_targets(batch.read_maps, batch.read_rows, batch.read_spans)):
            if layer >= 0:
                reads.setdefault(layer, []).append(targets)
    hidden, velocity, patches, pointed = _joint_pass(model, batch, x_t, times, taps, reads)
    flow = F.mse_loss(velocity, target)
    rows = batch.labels != IGNORE
    logits = model.lm_logits(hidden[rows]).float()
    per_token = F.cross_entropy(logits, batch.labels[rows], reduction="none")
    # Each task's mean over its tokens, then the mean over tasks: a three-token answer (localization) weighs
    # as much as a twenty-token note.
    task = batch.kinds[:, batch.num_image_tokens : batch.num_image_tokens + batch.labels.shape[1]][rows] - FIRST_TASK
    sums = torch.zeros(int(task.max()) + 1).index_add_(0, task, per_token)
    counts = torch.bincount(task, minlength=sums.numel())
    text = (sums[counts > 0] / counts[counts > 0]).mean()
    per_task = (sums.detach() / counts).masked_fill(counts == 0, float("nan"))
    total = flow_weight * flow + text_weight * text
    point = named = None
    if point_head is not None:
        point = grounding_loss(point_head, patches[heads.layer], batch.target_maps)  # type: ignore[arg-type]
        total = total + heads.grounding_weight * point  # type: ignore[union-attr]
    if name_head is not None:
        named = recognition_loss(name_head, patches[heads.recognition_layer], batch.object_labels)  # type: ignore[arg-type]
        total = total + heads.recognition_weight * named  # type: ignore[union-attr]
    pointing = torch.stack(pointed).mean() if pointed else None
    if pointing is not None:
        total = total + heads.pointing_weight * pointing  # type: ignore[union-attr]
    return Losses(total, flow, text, per_task, point, named, pointing)
