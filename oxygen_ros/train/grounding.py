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

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class GroundingHead(nn.Module):
    """Per-patch logit "this patch shows the named object" from a backbone hidden state (training only)."""

    def __init__(self, width: int, generator: torch.Generator) -> None:
        super().__init__()
        # Initialized from its own generator, the global one restored: adding the head changes no other draw.
        with torch.random.fork_rng(devices=[]):
            self.norm = nn.LayerNorm(width)
            self.score = nn.Linear(width, 1)
        with torch.no_grad():
            bound = width**-0.5
            self.score.weight.uniform_(-bound, bound, generator=generator)
            self.score.bias.zero_()

    def forward(self, patches: Tensor) -> Tensor:
        """patches [..., P, W] → logits [..., P]."""
        return self.score(self.norm(patches.float())).squeeze(-1)


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


def default_layer(depth: int) -> int:
    """The backbone layer whose output the head reads: the middle one (1 of 0-2 for the demo's three), so
    the layers after it can pass the mark on to the text and action tokens."""
    return max(0, (depth - 1) // 2)
