"""Expert demonstrations on the MuJoCo ALOHA's transfer cube, as training samples for the π0.5 layout.

``aloha_samples`` yields samples forever, deterministic for its seed: episodes seeded from TRAIN_SEED_BASE up
(held-out evaluation seeds are below it), each the scripted expert's joints (``expert.expert_episode``)
executed in the joint-space scene with a slowly wandering offset on the arm commands (an Ornstein-Uhlenbeck
process per joint, its scale drawn per episode, none in CLEAN_SHARE of them), while every sample is labelled
with the expert's own chunk from that step: the policy sees states off the expert's path and learns the way
back to it. An episode whose noisy execution does not hand the cube over gives no samples (its labels would
teach a way that failed).

A sample is one step of an episode (every STRIDE-th, from an offset drawn per episode, until a little after
the hand-over): the three cameras as the policy is served them (cam_high, left wrist, right wrist; square,
rendered with ``fast_render``), the 14-dim state and the next ``horizon`` expert actions in ALOHA's dataset
space (the trainer turns both into π's space through the embodiment adapter, as openpi's AlohaInputs does),
the instruction, the texts ``scene_texts`` gives for the instant (narration, memory note, the answer to the
sample's question) and where the cube appears in each image (the grounding loss's labels).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from oxygen_ros.engine import ASK_TASK

from ..episode import TRAIN_SEED_BASE
from . import scene_texts
from .env import CAMERA_OF, AlohaEnv
from .expert import EPISODE_STEPS, expert_episode
from .units import DT

__all__ = ["AlohaSample", "CAMERAS", "CONTROL_PERIOD_S", "HORIZON", "INSTRUCTION", "aloha_samples", "vocabulary"]

CAMERAS = ("cam_high", "cam_left_wrist", "cam_right_wrist")  # openpi's ALOHA image slots, in their order
CONTROL_PERIOD_S = DT
HORIZON = 50  # openpi's ALOHA action chunk
INSTRUCTION = "Transfer cube"  # openpi's aloha_sim prompt
STRIDE = 4  # a sample every this many steps of an episode
STEPS_AFTER_SUCCESS = 40  # keep demonstrating a little past the hand-over (evaluation ends at it)
CLEAN_SHARE = 0.3  # episodes executed without noise
NOISE_RAD = (0.01, 0.05)  # range of the per-episode scale of the arm-command offset (rad, stationary std)
NOISE_CORRELATION_STEPS = 25.0  # the offset's correlation time (0.5 s)
GRIPPER_NOISE = 0.05  # std of the gripper command's offset (normalized units) in noisy episodes


@dataclass(frozen=True)
class AlohaSample:
    images: tuple[np.ndarray, ...]  # CAMERAS' square uint8 images
    state: np.ndarray  # [14] dataset space: per arm six joints (rad) + gripper (0 closed .. 1 open), left first
    actions: np.ndarray  # [horizon, 14] dataset space: the expert's actions from this step on
    instruction: str
    texts: dict[str, str]  # {"language": phase, "memory": note, ASK_TASK: the answer to ``question``}
    target_uvs: tuple[tuple[float, float] | None, ...]  # per camera: where the cube's centre appears
    question: str = ""


def vocabulary() -> list[str]:
    return sorted({INSTRUCTION, *scene_texts.vocabulary()})


def training_seeds(seed: int, stream: int = 0) -> Iterator[int]:
    """Episode seeds >= TRAIN_SEED_BASE (below 2**32, which gym-aloha's box sampler takes), from ``seed`` (and
    ``stream``: an independent sequence for another use of the same seed)."""
    rng = np.random.default_rng([seed, 1_000_003, 14, stream] if stream else [seed, 1_000_003, 14])
    while True:
        yield TRAIN_SEED_BASE + int(rng.integers(0, 2**31))


def aloha_samples(seed: int, horizon: int = HORIZON, control_period_s: float = CONTROL_PERIOD_S,
                  image_size: int = 96) -> Iterator[AlohaSample]:  # fmt: skip
    """Samples forever, deterministic for ``seed`` (see the module docstring)."""
    if abs(control_period_s - DT) > 1e-9:
        raise ValueError(f"the ALOHA scene steps at {DT} s; a control period of {control_period_s} s was asked")
    rng = np.random.default_rng([seed, 14])
    env = AlohaEnv("transfer_cube", fast_render=True)
    for episode_seed in training_seeds(seed):
        yield from episode_samples(env, episode_seed, rng, horizon, image_size)


def episode_samples(env: AlohaEnv, episode_seed: int, rng: np.random.Generator, horizon: int,
                    image_size: int) -> list[AlohaSample]:  # fmt: skip
    """One noisy expert episode's samples (none when it fails)."""
    plan = expert_episode(episode_seed).actions
    scale = 0.0 if rng.random() < CLEAN_SHARE else rng.uniform(*NOISE_RAD)
    offset_rng = np.random.default_rng(rng.integers(0, 2**63))
    first = int(rng.integers(0, STRIDE))
    env.reset(episode_seed)
    offset = np.zeros(14)
    decay = np.exp(-1.0 / NOISE_CORRELATION_STEPS)
    spread = np.r_[np.full(6, scale), GRIPPER_NOISE * (scale > 0), np.full(6, scale), GRIPPER_NOISE * (scale > 0)]
    samples: list[AlohaSample] = []
    success_step: int | None = None
    for k in range(EPISODE_STEPS):
        if success_step is not None and k > success_step + STEPS_AFTER_SUCCESS:
            break
        if k % STRIDE == first:
            samples.append(make_sample(env, plan[np.minimum(np.arange(k, k + horizon), len(plan) - 1)], image_size, rng))
        offset = offset * decay + offset_rng.normal(size=14) * spread * np.sqrt(1 - decay**2)
        command = plan[k] + offset
        command[[6, 13]] = np.clip(command[[6, 13]], 0.0, 1.0)
        env.step(command)
        if success_step is None and env.success:
            success_step = k
    return samples if success_step is not None else []


def make_sample(env: AlohaEnv, actions: np.ndarray, image_size: int, rng: np.random.Generator) -> AlohaSample:
    """The scene as it is now, labelled with ``actions`` [horizon, 14] (dataset space) and its texts."""
    physics = env.physics
    images = env.images(image_size, image_size, CAMERAS)
    cube = scene_texts.cube_position(physics)
    question = scene_texts.QUESTIONS[int(rng.integers(0, len(scene_texts.QUESTIONS)))]
    return AlohaSample(
        images=tuple(images[c] for c in CAMERAS),
        state=env.state().astype(np.float64),
        actions=np.asarray(actions, dtype=np.float64),
        instruction=INSTRUCTION,
        texts={"language": scene_texts.phase(physics), "memory": scene_texts.memory_note(physics),
               ASK_TASK: scene_texts.answer(physics, question)},  # fmt: skip
        target_uvs=tuple(scene_texts.project(physics, CAMERA_OF[c], cube) for c in CAMERAS),
        question=question,
    )
