"""The training settings of ``oxygen-train-demo`` (``TrainConfig``), without torch: the recipes and the
command's ``--help`` read their defaults here; ``trainer`` runs them."""

from __future__ import annotations

from dataclasses import dataclass, field

from oxygen_ros.engine.questions import ASK_TASK
from oxygen_ros.model.network.config import ModelConfig, preset
from oxygen_ros.runtime.config import TaskConfig, default_tasks

ASSET_ID = "demo"


def training_tasks() -> list[TaskConfig]:
    """The tasks the demo serves, plus localization co-training (as pi0.5 co-trains on object localization):
    " Where:" → where the named object stands ("far left"). It grounds the instruction's object in the
    images with a direct signal; a node may serve it too (its prompt is in the checkpoint's training)."""
    return [*default_tasks(), TaskConfig("location", " Where:", every_n_frames=10, max_tokens=12)]


@dataclass
class TrainConfig:
    steps: int = 2600
    seed: int = 0
    samples: int = 28000  # expert samples (about 2.2 per control tick with the goal alternatives), generated before training
    data_workers: int = 2  # processes generating them (part of what makes the expert data: keep it fixed); also
    # the processes of the preprocessing and of the DAgger rollouts (those come out the same for any number)
    batch_size: int = 32
    lr: float = 2e-3
    min_lr_ratio: float = 0.05  # cosine decay ends at lr * this
    warmup_steps: int = 100
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    flow_weight: float = 1.0
    flow_samples: int = 2  # noise draws per sample sharing one prefix forward (see batch.py; 4 cost a fifth more
    # per step, and their chain was no better: docs/training.md, flow samples)
    text_weight: float = 1.0
    # the grounding loss (grounding.py): a training-only head points at the named object in every camera image;
    # 0 = off
    grounding_weight: float = 1.0
    grounding_layer: int = -1  # backbone layer it reads (-1: the middle one)
    # the recognition loss (grounding.py): a training-only head names the object each patch shows, one of
    # ``object_names`` (the samples' object_uvs); 0 or no names = off
    recognition_weight: float = 0.5
    recognition_layer: int = -1  # backbone layer its head reads (-1: the image features entering the backbone)
    object_names: tuple[str, ...] = ()
    # the pointing loss (pointing.py): each text task's attention looks at the objects its text is about (the
    # samples' text_uvs); 0 = off. The committed recipe has it at 0.1: the questions' answers and the memory
    # notes learn to read the objects they name (docs/training.md, the pointing loss). pointing_layers: the
    # backbone layer of each read (empty: the middle, then the last; -1: that read off)
    pointing_weight: float = 0.1
    pointing_layers: tuple[int, ...] = ()
    # BPE-dropout of the training prompts (Tokenizer.sampling): words the data never show whole (typed in capitals,
    # new verbs) reach the model in pieces it has learned; 0 = the canonical segmentation only (the committed
    # recipe: its one chain at 0.2 lost the closed loop, docs/training.md)
    prompt_dropout: float = 0.0
    # an uncased tokenizer (train_tokenizer's fold_case): "PICK UP THE RED CUP" reads as the lower-case prompt
    fold_case: bool = True
    control_period_s: float = 0.2
    preset: str = "demo"
    model: ModelConfig | None = None  # overrides the preset (tests)
    tasks: list[TaskConfig] = field(default_factory=training_tasks)
    prompt_format: str = "pi05_state"
    threads: int = 2  # torch threads (the result depends on their number, not on the cores; two fit the 20 minutes)
    dtype: str = "float32"  # stored weights: float32 or bfloat16
    save_every: int = 0  # also write the checkpoint every this many steps (0 = only at the end)
    delta_actions: bool = True  # arm joints relative to the state, gripper absolute (openpi's DeltaActions)
    ema_decay: float = 0.99  # the checkpoint holds an exponential moving average of the weights (0 = the last weights)
    # DAgger: after ``steps``, rounds of on-policy episodes labelled by the expert, each followed by its own
    # short schedule on all on-policy samples so far + fresh expert samples (see oxygen_ros/sim/dagger.py)
    dagger_rounds: int = 2
    dagger_episodes: int = 60  # policy episodes per round
    dagger_fresh_samples: int = 6000  # new expert samples per round
    dagger_steps: int = 250
    dagger_lr: float = 5e-4
    # what users vary (the sample source's variations: phrasings, lighting, distractors, absent objects) and
    # questions asked while acting (the runtime's ask path): the samples' questions and answers are one more
    # text task, its continuation the question (runtime.policy.QUESTION_TEMPLATE) instead of a fixed prompt
    variations: bool = True
    # the questions as a text task without the variations (a source whose samples carry questions of their own)
    questions: bool = False
    # the robot-side transforms between the data's space and the model's (oxygen_ros/embodiment: openpi's
    # AlohaInputs / AlohaOutputs for "aloha"); the checkpoint's norm stats and actions are in the model's space
    embodiment: str = "none"
    # the relative dims, stated (empty: every dim but the last, openpi's make_bool_mask(n, -1))
    delta_action_mask: tuple[bool, ...] = ()
    asset_id: str = ASSET_ID  # the norm stats' folder: assets/<asset_id>/norm_stats.json (openpi's asset id)

    def model_config(self) -> ModelConfig:
        return self.model or preset(self.preset)

    def text_task_names(self) -> list[str]:
        """The text tasks trained, in the order of their losses: the configured ones, then the questions."""
        return [t.name for t in self.tasks] + ([ASK_TASK] if self.variations or self.questions else [])

    def grounding_at(self, depth: int) -> int:
        from .grounding import default_layer  # torch: loaded when training, not for --help

        return default_layer(depth) if self.grounding_layer < 0 else self.grounding_layer

    def pointing_at(self, depth: int) -> tuple[int, ...]:
        from .pointing import READS, default_layers  # torch: loaded when training

        layers = self.pointing_layers or default_layers(depth)
        if len(layers) != READS or not all(-1 <= layer < depth for layer in layers):
            raise ValueError(f"pointing_layers {self.pointing_layers} must name {READS} layers of the {depth}-layer "
                             "backbone (-1: that read off)")
        return tuple(layers)

    def delta_mask(self, action_dim: int) -> list[bool]:
        """The stated relative dims, else every dim but the last (the gripper) relative to the state, as openpi's
        make_bool_mask(n, -1); none with absolute actions."""
        if not self.delta_actions:
            return []
        if self.delta_action_mask:
            if len(self.delta_action_mask) != action_dim:
                raise ValueError(f"delta_action_mask has {len(self.delta_action_mask)} dims; the actions have {action_dim}")
            return list(self.delta_action_mask)
        return [i < action_dim - 1 for i in range(action_dim)]
