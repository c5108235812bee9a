"""The grounding loss: which patches of each camera image show the object the instruction names.

Finding the named object is two steps for the model: the patch that shows it must notice that the prompt
names its colour (the prefix is bidirectional: image tokens attend to the prompt), and the text and action
tokens must then read where that patch is. Neither step has a gradient of its own while the other is
missing, so behaviour cloning alone sat on a plateau for 650 to more than 1500 steps, depending on the seed
(README, training). This loss gives the first step a direct signal: a linear head, used only in training,
scores every patch token of every camera image after a middle backbone layer, and per image a softmax over
its patches is trained to match where the named object is (the simulator knows: ``target_uvs``, spread
bilinearly over the nearest patch centres by ``data.target_map``, so the label keeps the position inside a
patch, which the wrist camera's fine approach needs). It is a dense form of the object localization that pi0.5
co-trains on. The head is not part of the checkpoint: the served model is the plain pi0.5 structure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


IGNORE = -100  # recognition label of a patch that shows no object's centre (or two)


class PatchHead(nn.Module):
    """Per-patch logits over ``outputs`` classes from a backbone hidden state (training only)."""

    def __init__(self, width: int, generator: torch.Generator, outputs: int = 1) -> None:
        super().__init__()
        # Initialized from its own generator, the global one restored: adding the head changes no other draw.
        with torch.random.fork_rng(devices=[]):
            self.norm = nn.LayerNorm(width)
            self.score = nn.Linear(width, outputs)
        with torch.no_grad():
            bound = width**-0.5
            self.score.weight.uniform_(-bound, bound, generator=generator)
            self.score.bias.zero_()

    def forward(self, patches: Tensor) -> Tensor:
        """patches [..., P, W] → logits [..., P, outputs]."""
        return self.score(self.norm(patches.float()))


class GroundingHead(PatchHead):
    """Per-patch logit "this patch shows the named object"."""

    def forward(self, patches: Tensor) -> Tensor:
        """patches [..., P, W] → logits [..., P]."""
        return super().forward(patches).squeeze(-1)


@dataclass
class PatchHeads:
    """The training-only heads on the image patch tokens, with their weights (a head of None or weight 0 is
    off): the grounding head reads them after backbone layer ``layer``, the recognition head after
    ``recognition_layer`` (-1: as they enter the backbone, so that the vision tower itself names the objects)."""

    layer: int
    grounding: GroundingHead | None = None
    grounding_weight: float = 0.0
    recognition: PatchHead | None = None
    recognition_weight: float = 0.0
    recognition_layer: int = -1
    # not a head: the weight of the pointing loss (pointing.py) and the backbone layer of each of its reads
    pointing_weight: float = 0.0
    pointing_layers: tuple[int, ...] = ()

    def parameters(self) -> list[nn.Parameter]:
        return [p for h in (self.grounding, self.recognition) if h is not None for p in h.parameters()]


def grounding_loss(head: GroundingHead, patches: Tensor, maps: Tensor) -> Tensor:
    """Cross-entropy of each image's softmax over its patches ``patches`` [B, V, P, W] against its target map
    ``maps`` [B, V, P] (rows of zeros, no target, are left out), averaged over the images with a target; zero
    (still in the graph) when none has one."""
    logits = head(patches.flatten(0, 1))
    targets = maps.flatten(0, 1)
    has = targets.sum(-1) > 0
    if not bool(has.any()):
        return logits.sum() * 0.0
    return -(targets[has] * F.log_softmax(logits[has], dim=-1)).sum(-1).mean()


def recognition_loss(head: PatchHead, patches: Tensor, labels: Tensor) -> Tensor:
    """Cross-entropy of the object named at each labelled patch: ``patches`` [B, V, P, W], ``labels`` long
    [B, V, P] (a class, or IGNORE); zero (still in the graph) when no patch is labelled."""
    logits = head(patches)
    rows = labels != IGNORE
    if not bool(rows.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[rows], labels[rows])


def default_layer(depth: int) -> int:
    """The backbone layer whose output the head reads: the middle one (1 of 0-2 for the demo's three), so
    the layers after it can pass the mark on to the text and action tokens."""
    return max(0, (depth - 1) // 2)
