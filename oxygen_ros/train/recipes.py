"""The committed recipes of ``oxygen-train-demo``, one per simulated environment: the training settings, the
sample source, the on-policy source of the DAgger rounds and the tokenizer's extra vocabulary.

* ``tabletop``: the package's own pick task (``oxygen_ros/sim``; ``models/demo``; docs/training.md).
* ``aloha_transfer_cube``: the MuJoCo ALOHA's cube hand-over (``oxygen_ros/sim/aloha``; ``models/aloha``) in
  openpi's ALOHA layout: the data in ALOHA's dataset space go through the ``aloha`` embodiment's input
  transforms (joint flips, the gripper as pi's angle), so the checkpoint is served through
  ``config/robots/aloha.yaml``'s adapter and conversions as a real fine-tune is. Absolute joint targets, as
  openpi's own recipe for this simulated task (``pi0_aloha_sim``: ``use_delta_joint_actions=False``); its
  real-robot ALOHA recipes use relative arm joints (``make_bool_mask(6, -1, 6, -1)``), which this policy's
  closed loop could not hold (docs/training-aloha.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from oxygen_ros.runtime.config import default_tasks

from .train_config import TrainConfig

if TYPE_CHECKING:  # trainer imports torch: the recipes' defaults (and --help) do without it
    from .trainer import OnPolicySource, SampleSource

ENVS = ("tabletop", "aloha_transfer_cube")  # spelled as oxygen-sim's --env
OUT_DIRS = {"tabletop": "models/demo", "aloha_transfer_cube": "models/aloha"}
# the older spelling, still accepted (oxygen-train-demo says which name to use)
ALIASES = {"table_top": "tabletop"}
# openpi's real-robot ALOHA configs: make_bool_mask(6, -1, 6, -1), the arm joints relative, the grippers absolute
# (the ALOHA recipe's relative dims with --no-absolute-actions)
ALOHA_DELTA_MASK = (True,) * 6 + (False,) + (True,) * 6 + (False,)


def recipe(env: str) -> TrainConfig:
    env = ALIASES.get(env, env)
    if env == "tabletop":
        from oxygen_ros.sim.expert import object_names

        return TrainConfig(object_names=tuple(object_names()))
    if env == "aloha_transfer_cube":
        from oxygen_ros.sim.aloha.units import DT as CONTROL_PERIOD_S  # the dataset's period (no MuJoCo import)

        return TrainConfig(
            steps=3000, samples=16000, preset="aloha_demo", control_period_s=CONTROL_PERIOD_S, tasks=default_tasks(),
            variations=False, questions=True, embodiment="aloha", delta_actions=False,
            delta_action_mask=ALOHA_DELTA_MASK, asset_id="trossen",
            grounding_weight=1.0, recognition_weight=0.0, pointing_weight=0.0,
            # DAgger rounds with the re-planning expert (--dagger-rounds N) lowered the closed loop in the one
            # chain measured (docs/training-aloha.md): behaviour cloning alone is the committed recipe
            dagger_rounds=0, dagger_episodes=40, dagger_fresh_samples=4000, dagger_steps=300,
        )  # fmt: skip
    raise ValueError(f"unknown environment {env!r}; choose one of {list(ENVS)}")


def sources(env: str, variations: bool) -> tuple[SampleSource, OnPolicySource | None, Sequence[str]]:
    """(expert samples, on-policy samples or None, extra tokenizer vocabulary) of ``env``."""
    env = ALIASES.get(env, env)
    if env == "tabletop":
        from oxygen_ros.sim.dagger import policy_samples
        from oxygen_ros.sim.dataset import expert_samples, vocabulary

        if variations:
            return partial(expert_samples, variations=True), partial(policy_samples, variations=True), vocabulary(True)
        return expert_samples, policy_samples, vocabulary(False)
    if env == "aloha_transfer_cube":
        from oxygen_ros.sim.aloha.dagger import policy_samples as aloha_policy_samples
        from oxygen_ros.sim.aloha.dataset import aloha_samples, vocabulary as aloha_vocabulary

        return aloha_samples, aloha_policy_samples, aloha_vocabulary()
    raise ValueError(f"unknown environment {env!r}; choose one of {list(ENVS)}")
