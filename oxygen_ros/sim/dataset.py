"""Expert demonstrations for behaviour cloning: the interface between the simulator and the trainer.

`expert_samples` yields one `DemoSample` per control tick of simulated episodes, forever, deterministic for
its seed. Episodes are seeded from TRAIN_SEED_BASE upwards (held-out evaluation seeds are below it). The
robot executes the expert's chunks with injected noise (a random offset that grows over each chunk, and now
and then a chunk that never arrives), while every sample is labelled with the expert's correction from the
state the robot is really in (DAgger-style), so a cloned policy learns to recover from its own errors.
(`dagger.py` goes further: the trained policy itself drives, and the expert labels the states it reaches.)

Detours: in DETOUR_P of the episodes the robot first executes the expert's way to another object (until it
is above it) while every sample is still labelled with the way to the named one. Without them the arm's own
pose tells where the named object is (the expert always heads for it), and a cloned policy learns to follow
its arm rather than the instruction; a policy that has wandered to the wrong object must know to leave it.

Goal alternatives: while the robot holds nothing, a tick yields, after its own sample, one more sample per
other object of the scene: the same images and state, an instruction naming that object, and its texts and
action labels (the expert's way to it from where the robot is). Without them a scene's layout and start pose
identify the episode, and a small model memorizes "this layout: that place" instead of looking for the named
object (measured: without them the first chunk headed for the named object at chance on held-out scenes).
The alternatives share their tick's image arrays (the trainer stores them once). Held objects are never
relabelled: the expert only ever puts an object down by succeeding with it.

Colour randomization: each sample shows its scene with the object colours permuted at random (the images,
the instruction and the texts all use the new colours; geometry and actions are unchanged, since the expert
never looks at colours). A scene's layout then no longer predicts which object is meant: the policy has to
find the instruction's colour in the images instead of memorizing the scenes it was trained on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from oxygen_ros.engine import ASK_TASK
from oxygen_ros.runtime.trajectory import trajectory_points

from .episode import EVAL_SEED_LIMIT, TRAIN_SEED_BASE, EpisodeSpec, SimEpisode
from .expert import (
    all_texts, expert_chunk, instruction_for, location_text, memory_neighbour, memory_text, subtask_index, subtask_text,
)  # fmt: skip
from .phrasing import FAMILIES, phrase, with_filler
from .questions import all_answers, answer, draw_question, objects_read
from .render import CAMERA_NAMES, render_views, view_fraction
from .variation import DISTRACTORS, Lighting, absent_name
from .scene import ARM_JOINTS, COLOURS, JOINT_LOWER, JOINT_NAMES, JOINT_UPPER, STATE_DIM, Scene, SceneObject

__all__ = [
    "CAMERA_NAMES", "CONTROL_PERIOD_S", "DemoSample", "EVAL_SEED_LIMIT", "HORIZON", "JOINT_NAMES", "STATE_DIM",
    "TASK_NAMES", "TRAINING_TASK_NAMES", "TRAIN_SEED_BASE", "expert_samples", "vocabulary",
]  # fmt: skip

CONTROL_PERIOD_S = 0.2  # the demo's control rate: 5 Hz
HORIZON = 10
TASK_NAMES = ("language", "memory")  # the text tasks the demo serves (config/demo_policy.yaml)
EXTRA_TICKS_AFTER_SUCCESS = 2  # keep demonstrating the lift a little past the success instant

TEXTS: dict[str, Callable[[Scene, int | None, str | None], str | None]] = {
    "language": subtask_text, "memory": memory_text, "location": location_text,
}  # the keys of DemoSample.texts, besides ASK_TASK: the answer to the sample's question
TRAINING_TASK_NAMES = tuple(TEXTS)  # the served tasks + the co-training localization
CLEAN_SHARE = 0.3  # episodes executed without noise
NOISE_RAD = (0.01, 0.06)  # range of the per-episode arm noise scale (rad, on the executed chunk)
NOISY_TICK_P = 0.5  # share of a noisy episode's ticks whose executed chunk is offset
GRIPPER_NOISE_M = 0.02
DROP_CHUNK_P = 0.08
DETOUR_P = 0.4  # episodes whose robot first heads for another object, labelled with the way to the named one
PLAIN_P = 0.3  # samples whose instruction is a plain template; the others draw a phrasing family (phrasing.py)
FILLER_P = 0.3  # phrased instructions that also get a made-up word (phrasing.with_filler)
LIGHTING_P = 0.7  # ticks whose images are lit differently (variation.Lighting.random, per camera)
DISTRACTOR_P = 0.3  # episodes with a distractor of the named object's colour or kind
ABSENT_P = 0.3  # ticks (holding nothing) that also yield a sample naming an absent object: stay, say so


NO_OBJECT = None  # a read of ``DemoSample.text_uvs`` that finds no object: its look goes to no image


@dataclass(frozen=True)
class DemoSample:
    images: tuple[np.ndarray, ...]  # one HxWx3 uint8 per camera slot used by the policy (base, wrist)
    state: np.ndarray  # [STATE_DIM] float32: arm joint positions + gripper opening
    actions: np.ndarray  # [horizon, STATE_DIM] float32: absolute joint targets at t + (i + 1)·dt
    instruction: str  # e.g. "pick up the red cup"
    texts: dict[str, str]  # {"language": current subtask, "memory": scene note, "location": "far left", "ask": answer}
    # per camera (CAMERA_NAMES order): where the named object's centre appears in its image, as fractions (u
    # across, v down) of its width and height; None where it is out of view or the instruction names no object
    target_uvs: tuple[tuple[float, float] | None, ...] = ()
    question: str = ""  # a question about the scene, answered by texts["ask"] ("" = none)
    # per camera: (u, v, name) of every object whose centre is in view (the recognition loss's labels)
    object_uvs: tuple[tuple[tuple[float, float, str], ...], ...] = ()
    # per text task, per read (the model's middle, then last layer): where the object the task's text has to
    # look at appears in the base camera (as ``target_uvs``, None for the wrist camera; () where it reads
    # none; NO_OBJECT where the look finds no object and goes to no image): the memory note its neighbour
    # (last), the question the object it is about, then the one its answer names
    text_uvs: dict[str, tuple[tuple[tuple[float, float] | None, ...] | None, ...]] = field(default_factory=dict)


def vocabulary(variations: bool = False) -> list[str]:
    """Every plain instruction and text the data can contain (train the tokenizer on these); with
    ``variations`` also the absent-object narrations and the answers (the phrasings and questions of the data
    reach the tokenizer through the samples)."""
    texts = {t for texts in all_texts().values() for t in texts}
    if variations:
        return sorted(texts | set(all_texts(absent=True)["language"]) | set(all_answers()))
    return sorted(texts)


def training_seeds(seed: int, stream: int = 0) -> Iterator[int]:
    """Episode seeds for a training run: >= TRAIN_SEED_BASE, deterministic for ``seed`` (and ``stream``, which
    draws an independent sequence for another use of the same seed)."""
    rng = np.random.default_rng([seed, 1_000_003, stream] if stream else [seed, 1_000_003])
    while True:
        yield TRAIN_SEED_BASE + int(rng.integers(0, 10**12))


def expert_samples(seed: int, horizon: int = HORIZON, control_period_s: float = CONTROL_PERIOD_S,
                   image_size: int = 64, variations: bool = False) -> Iterator[DemoSample]:
    """Demonstration samples forever, deterministic for ``seed`` (see the module docstring); ``variations``:
    also what users vary (``tick_samples``, ``episode_samples``)."""
    for episode_seed in training_seeds(seed):
        yield from episode_samples(episode_seed, horizon, control_period_s, image_size, variations=variations)


def expert_episode(spec: EpisodeSpec, horizon: int = HORIZON, control_period_s: float = CONTROL_PERIOD_S) -> SimEpisode:
    """The clean expert in closed loop (chunks through the follower each tick) until success or time out."""
    episode = SimEpisode(spec, control_period_s)
    while not episode.done:
        actions = expert_chunk(episode.scene, episode.target, horizon, control_period_s)
        episode.deliver(trajectory_points(actions, JOINT_NAMES, control_period_s)[0])
        episode.advance(episode.time_s + control_period_s)
    return episode


def _painted(scene: Scene, permutation: np.ndarray | None) -> Scene:
    """``scene`` with colour i painted as colour permutation[i] (None: the scene itself)."""
    if permutation is None:
        return scene
    painted = scene.copy()
    for o in painted.objects:
        o.colour = COLOURS[int(permutation[COLOURS.index(o.colour)])]
    return painted


def _said(name: str, rng: np.random.Generator) -> str:
    """An instruction naming ``name``: a plain template, or often a phrasing family's, some with a made-up
    word in it."""
    if rng.random() < PLAIN_P:
        return instruction_for(name, int(rng.integers(3)))
    said = phrase(name, FAMILIES[1 + int(rng.integers(len(FAMILIES) - 1))], rng, "train")
    return with_filler(said, rng) if rng.random() < FILLER_P else said


def _centre(obj: SceneObject) -> np.ndarray:
    return obj.position + np.array([0.0, 0.0, obj.height / 2])


def objects_in_view(scene: Scene) -> tuple[tuple[tuple[float, float, str], ...], ...]:
    """Per camera (CAMERA_NAMES order): (u, v, name) of every object whose centre appears in its image."""
    return tuple(tuple((*uv, o.name) for o in scene.objects if (uv := view_fraction(scene, camera, _centre(o))) is not None)
                 for camera in CAMERA_NAMES)  # fmt: skip


def _goal_sample(painted: Scene, images: tuple[np.ndarray, ...], goal: int | None, instruction: str, state: np.ndarray,
                 actions: np.ndarray, name: str | None = None, rng: np.random.Generator | None = None,
                 seen: tuple[tuple[tuple[float, float, str], ...], ...] = ()) -> DemoSample:
    """A sample of the (painted) scene labelled for ``goal`` (None: the absent object ``name``), with a question
    about the scene drawn from ``rng``; ``seen``: the scene's ``objects_in_view``."""
    texts = {task: text(painted, goal, name) or "" for task, text in TEXTS.items()}
    uvs = _uvs(painted, goal) or (None,) * len(CAMERA_NAMES)
    reads = {"memory": ((), _table_uvs(painted, memory_neighbour(painted, goal)))} if goal is not None else {}
    question = ""
    if rng is not None:
        asked = draw_question(painted, rng)
        question, texts[ASK_TASK] = asked.text, answer(painted, asked)
        reads[ASK_TASK] = tuple(NO_OBJECT if i is None else _table_uvs(painted, i) for i in objects_read(painted, asked))
    return DemoSample(images=images, state=state, actions=actions, instruction=instruction, texts=texts, target_uvs=uvs,
                      question=question, object_uvs=seen, text_uvs=reads)  # fmt: skip


def _uvs(scene: Scene, index: int | None) -> tuple[tuple[float, float] | None, ...]:
    """Per camera, where object ``index``'s centre appears (None: out of view); () for no object."""
    if index is None:
        return ()
    centre = _centre(scene.objects[index])
    return tuple(view_fraction(scene, camera, centre) for camera in CAMERA_NAMES)


def _table_uvs(scene: Scene, index: int | None) -> tuple[tuple[float, float] | None, ...]:
    """``_uvs`` in the base camera only (None for the others; () for no object): the texts' places and sides
    are the table's, and only the base camera sees the table from a fixed place. In the wrist camera, which
    moves with the arm, where an object appears says nothing about where it stands, so a text task's look
    there would read a place the answer does not mean."""
    uvs = _uvs(scene, index)
    return tuple(uv if camera == "base" else None for camera, uv in zip(CAMERA_NAMES, uvs)) if uvs else ()


def tick_samples(episode: SimEpisode, actions: np.ndarray, permutation: np.ndarray | None, image_size: int,
                 horizon: int, control_period_s: float, rng: np.random.Generator | None = None,
                 variations: bool = False) -> list[DemoSample]:
    """The samples of the episode's current tick: its own (instruction, texts, ``actions``), then with ``rng``
    (while nothing is held) one per other object of the scene as the goal; one rendering, seen painted by
    ``permutation``. With ``variations`` (and ``rng``): often under other lighting, the instructions phrased as
    people type them, now and then one more sample naming an absent object (labelled to stay where it is),
    and every sample with a question and its answer."""
    scene, target = episode.scene, episode.target
    vary = rng if variations else None
    painted = _painted(scene, permutation)
    images = render_views(painted, image_size)
    if vary is not None and vary.random() < LIGHTING_P:
        images = Lighting.random(vary).apply(images)
    name = painted.objects[target].name if target is not None else episode.spec.target_name
    said = episode.spec.instruction  # the episode's own words, in the painted colours
    if target is not None:
        said = said.replace(scene.objects[target].name, painted.objects[target].name)
    if vary is not None and name:
        said = _said(name, vary)
    seen = objects_in_view(painted)
    samples = [_goal_sample(painted, images, target, said, episode.state, actions, name, vary, seen)]
    if rng is None or scene.held is not None:
        return samples
    for goal in range(len(scene.objects)):
        if goal != target:
            labels = expert_chunk(scene, goal, horizon, control_period_s)
            goal_name = painted.objects[goal].name
            said = _said(goal_name, vary) if vary is not None else instruction_for(goal_name, int(rng.integers(3)))
            samples.append(_goal_sample(painted, images, goal, said, episode.state, labels, rng=vary, seen=seen))
    if vary is not None and target is not None and vary.random() < ABSENT_P:
        missing = absent_name(painted, vary)
        still = expert_chunk(scene, None, horizon, control_period_s)
        samples.append(_goal_sample(painted, images, None, _said(missing, vary), episode.state, still, missing, vary, seen))
    return samples


def _decoy(episode: SimEpisode, rng: np.random.Generator) -> int | None:
    """The object a detour episode first heads for instead of the named one (None: no detour)."""
    others = [i for i in range(len(episode.scene.objects)) if i != episode.target]
    if episode.target is None or not others or rng.random() >= DETOUR_P:
        return None
    return others[int(rng.integers(len(others)))]


def drawn_distractor(spec: EpisodeSpec, rng: np.random.Generator) -> EpisodeSpec:
    """``spec`` with, in ``DISTRACTOR_P`` of the draws, a distractor of the named object's colour or kind."""
    if rng.random() < DISTRACTOR_P:
        return replace(spec, distractor=DISTRACTORS[int(rng.integers(len(DISTRACTORS)))])
    return spec


def episode_samples(episode_seed: int, horizon: int, control_period_s: float, image_size: int,
                    noisy: bool | None = None, recolour: bool = True, relabel: bool = True,
                    variations: bool = False) -> Iterator[DemoSample]:
    """The samples of one episode (noise on unless ``noisy`` says otherwise or the seed draws a clean one;
    colours randomized per tick and goal alternatives unless ``recolour`` / ``relabel`` is False; with
    ``variations`` sometimes a distractor, and the variations of ``tick_samples``)."""
    spec = EpisodeSpec.from_seed(episode_seed)
    rng = np.random.default_rng([episode_seed, 11])
    if variations and relabel:
        spec = drawn_distractor(spec, rng)
    episode = SimEpisode(spec, control_period_s, stop_on_success=False)
    clean = rng.random() < CLEAN_SHARE if noisy is None else not noisy
    scale = 0.0 if clean else rng.uniform(*NOISE_RAD)
    extra = EXTRA_TICKS_AFTER_SUCCESS
    decoy = _decoy(episode, rng)
    while extra >= 0 and episode.time_s < episode.time_limit_s - 1e-9:
        actions = expert_chunk(episode.scene, episode.target, horizon, control_period_s)
        permutation = rng.permutation(len(COLOURS)) if recolour else None
        yield from tick_samples(episode, actions, permutation, image_size, horizon, control_period_s,
                                rng if relabel else None, variations)  # fmt: skip
        if decoy is not None and subtask_index(episode.scene, decoy) != 0:
            decoy = None  # above the decoy: the detour ends, the robot heads for the named object from here
        executed = (actions if decoy is None else expert_chunk(episode.scene, decoy, horizon, control_period_s)).astype(np.float64)
        if scale and rng.random() < NOISY_TICK_P:  # this tick the robot goes somewhere else than told
            offset = np.zeros(STATE_DIM)
            offset[:ARM_JOINTS] = rng.normal(0.0, scale, ARM_JOINTS)
            offset[ARM_JOINTS] = rng.normal(0.0, GRIPPER_NOISE_M) if rng.random() < 0.2 else 0.0
            executed = np.clip(executed + offset, JOINT_LOWER, JOINT_UPPER)
        if not (scale and rng.random() < DROP_CHUNK_P):
            trajectory, _ = trajectory_points(executed, JOINT_NAMES, control_period_s)
            episode.deliver(trajectory)
        episode.advance(episode.time_s + control_period_s)
        if episode.success_time_s is not None:
            extra -= 1
