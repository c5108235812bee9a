"""Expert demonstrations → training tensors, through the runtime's own preprocessing.

Every sample goes through :meth:`PolicyRuntime.make_frame` (image slots, resize and scaling, state
normalization, the prompt with the discretized state) and the text tasks' continuation prompts come from
the runtime's engine, so the model is trained on exactly the inputs it is served at inference.
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import operator
from contextlib import contextmanager
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import numpy as np
import torch
from tqdm import tqdm

from oxygen_ros.embodiment import Adapter
from oxygen_ros.model.checkpoints.normalize import ACTIONS_KEY, STATE_KEY, Normalizer, NormStats
from oxygen_ros.engine import ASK_TASK
from oxygen_ros.model.tokenizers.prompt import continuation_tokens, format_prompt
from oxygen_ros.runtime.policy import QUESTION_TEMPLATE, PolicyRuntime

from .grounding import IGNORE
from .pointing import ELSEWHERE, READS


class Sample(Protocol):
    """What the simulator's ``oxygen_ros.sim.dataset.DemoSample`` provides (and, optionally, ``target_uvs``:
    per camera image, where the named object appears, as fractions of its width and height, or None; it feeds
    the grounding loss, see ``grounding.py``; and ``object_uvs``: per camera image, (u, v, name) of every object
    whose centre is in view; it feeds the recognition loss)."""

    images: tuple[np.ndarray, ...]
    state: np.ndarray
    actions: np.ndarray
    instruction: str
    texts: dict[str, str]


# expert_samples(seed, horizon, control_period_s, image_size) → demonstration samples, deterministic for the seed
SampleSource = Callable[[int, int, float, int], Iterator[Sample]]


_DONE: Any = None  # a shared count of items done, set by _forked_map before its workers fork
_JOB: Any = None  # what a _forked_map worker calls, set before the workers fork (inherited, never pickled)


def _count_shared() -> None:
    with _DONE.get_lock():
        _DONE.value += 1


def _one_thread() -> None:
    # A forked child must not use the parent's OpenMP pool (it would wait on threads that did not fork).
    torch.set_num_threads(1)


def _run_job(args: tuple) -> Any:
    return _JOB(*args, made=_count_shared)


def _forked_map(job: Callable[..., Any], jobs: Sequence[tuple], total: int, desc: str, progress: bool) -> list[Any]:
    """``job(*args, made=...)`` for every ``args`` of ``jobs``, one forked process each, results in order;
    ``job`` calls ``made()`` per item done (``total`` in all) for the progress bar. ``job`` reaches the workers
    by the fork (a closure over large data costs nothing); only ``args`` and the results are pickled. One job
    runs here."""
    global _DONE, _JOB
    bar = tqdm(total=total, desc=desc, disable=not progress, dynamic_ncols=True, leave=False)
    try:
        if len(jobs) == 1:
            return [job(*jobs[0], made=lambda: bar.update(1))]
        context = multiprocessing.get_context("fork")
        _DONE, _JOB = context.Value("q", 0), job
        with context.Pool(len(jobs), initializer=_one_thread) as pool:
            pending = pool.map_async(_run_job, jobs)
            while not pending.ready():
                pending.wait(0.5)
                bar.update(_DONE.value - bar.n)
            return pending.get()
    finally:
        bar.close()
        _DONE = _JOB = None


def _take(source: SampleSource, seed: int, count: int, horizon: int, period_s: float, image_size: int,
          made: Callable[[], object]) -> list[Sample]:
    samples = []
    for sample in itertools.islice(source(seed, horizon, period_s, image_size), count):
        samples.append(sample)
        made()
    return samples


def collect_samples(
    source: SampleSource, seed: int, count: int, horizon: int, period_s: float, image_size: int, workers: int = 1,
    progress: bool = False,
) -> list[Sample]:
    """``count`` samples from ``workers`` expert streams (stream w has seed ``seed * 100 + w``), in stream order.

    The result depends on (seed, count, workers) only, not on timing; workers are forked processes.
    """
    workers = max(1, min(workers, count))
    jobs = [(source, seed * 100 + w, count // workers + (w < count % workers), horizon, period_s, image_size) for w in range(workers)]
    parts = _forked_map(_take, jobs, count, "expert samples", progress)
    return [sample for part in parts for sample in part]


def quantile_stats(values: np.ndarray) -> NormStats:
    """mean/std/q01/q99 per dimension of values [N, D] (openpi's statistics)."""
    v = np.asarray(values, dtype=np.float64)
    return NormStats(
        mean=v.mean(axis=0), std=v.std(axis=0), q01=np.quantile(v, 0.01, axis=0), q99=np.quantile(v, 0.99, axis=0)
    )


def model_space(sample: Sample, adapter: Adapter | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The sample's (state, actions) in the model's space: through the embodiment adapter's ``state_in`` and
    ``actions_in`` (openpi's input transforms of training data, e.g. AlohaInputs), unchanged without one."""
    if adapter is None or adapter.name == "none":
        return sample.state, sample.actions
    return adapter.state_in(sample.state), adapter.actions_in(sample.actions)


def relative_actions(sample: Sample, delta_mask: Sequence[bool], adapter: Adapter | None = None) -> np.ndarray:
    """The chunk with the masked dims relative to the state (openpi's DeltaActions; the runtime adds it back),
    in the model's space (``model_space``)."""
    state, chunk = model_space(sample, adapter)
    mask = np.zeros(chunk.shape[-1], dtype=bool)
    mask[: len(delta_mask)] = delta_mask
    return (chunk - np.where(mask, state, 0.0)).astype(np.float32)


def compute_norm_stats(samples: Sequence[Sample], delta_mask: Sequence[bool] = (), adapter: Adapter | None = None) -> dict[str, NormStats]:
    """State and action statistics of the expert data in the model's space (every action of every chunk
    counts; actions after DeltaActions, as openpi computes them)."""
    states = np.stack([model_space(s, adapter)[0] for s in samples])
    actions = np.concatenate([relative_actions(s, delta_mask, adapter) for s in samples])
    return {STATE_KEY: quantile_stats(states), ACTIONS_KEY: quantile_stats(actions)}


def text_corpus(
    samples: Sequence[Sample], normalizer: Normalizer, task_prompts: Sequence[str], vocabulary: Iterable[str] = (),
    adapter: Adapter | None = None,
) -> list[str]:
    """Every distinct string the model reads or writes: the prompts exactly as the runtime builds them
    (instruction and discretized state), each task's continuation prompt and target text, and the
    simulator's ``vocabulary`` (texts the samples may not happen to contain)."""
    strings = set(task_prompts) | {" " + v for v in vocabulary}
    for s in samples:
        strings.add(format_prompt(s.instruction, normalizer.normalize_state(model_space(s, adapter)[0], clip=True), "pi05_state"))
        strings.update(" " + t for t in s.texts.values())
        if getattr(s, "question", ""):
            strings.add(QUESTION_TEMPLATE.format(question=s.question))
    return sorted(strings)


@dataclass
class TrainingSet:
    """Preprocessed samples, stored compactly (images as the uint8 they came from)."""

    pixels: torch.Tensor  # uint8 [M, V, 3, S, S]: the valid image slots; pixels_from_uint8 gives the model input
    image_index: torch.Tensor  # long [N]: the row of ``pixels`` each sample shows (samples may share images)
    image_slots: torch.Tensor  # bool [slots]: which slots are valid (the same for every sample)
    prompts: list[torch.Tensor]  # long [n_i] prompt ids, BOS first
    texts: list[list[torch.Tensor]]  # per sample, per task: long target ids (text then EOS)
    actions: torch.Tensor  # float32 [N, H, A] normalized action chunks
    continuations: list[torch.Tensor]  # per task: long ids of its continuation prompt
    # float32 [N, V, P]: per image, how much each (row-major) patch shows the named object (target_map); a row
    # of zeros where it is out of view or unknown
    target_maps: torch.Tensor | None = None
    # the question-answering task (ASK_TASK): its index among the tasks (-1: none) and per sample the question's
    # continuation ids (empty: the sample asks nothing, and has no answer)
    question_task: int = -1
    questions: list[torch.Tensor] | None = None
    # long [N, V, P]: per image, the class (index in the object names) of the object whose centre each patch
    # shows, IGNORE elsewhere (object_labels); None: built without object names
    object_labels: torch.Tensor | None = None
    # float32 [N, K, READS, V·P + 1]: per text task, per read, where the object its text looks at is (read_maps);
    # None: no sample says
    read_maps: torch.Tensor | None = None
    # per sample, its text streams as batch.text_layout lays them out (filled on first use)
    layouts: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return self.actions.shape[0]

    def continuation(self, sample: int, task: int) -> torch.Tensor:
        """The ids after the prefix that lead to task ``task``'s text: its prompt, or the sample's question."""
        if task == self.question_task and self.questions is not None:
            return self.questions[sample]
        return self.continuations[task]

    def __add__(self, other: "TrainingSet") -> "TrainingSet":
        """Both sets' samples, this one's first (the same image slots and task continuations required)."""
        if not torch.equal(self.image_slots, other.image_slots):
            raise ValueError("the training sets fill different image slots")
        if [c.tolist() for c in self.continuations] != [c.tolist() for c in other.continuations] or (
                self.question_task != other.question_task):
            raise ValueError("the training sets have different text tasks")
        return TrainingSet(
            pixels=torch.cat([self.pixels, other.pixels]),
            image_index=torch.cat([self.image_index, other.image_index + self.pixels.shape[0]]),
            image_slots=self.image_slots,
            prompts=self.prompts + other.prompts,
            texts=self.texts + other.texts,
            actions=torch.cat([self.actions, other.actions]),
            continuations=self.continuations,
            target_maps=_cat_labels(self, other, "target_maps", 0.0),
            question_task=self.question_task,
            questions=None if self.questions is None else self.questions + (other.questions or []),
            object_labels=_cat_labels(self, other, "object_labels", IGNORE),
            read_maps=_cat_labels(self, other, "read_maps", 0.0),
        )


def _cat_labels(first: TrainingSet, second: TrainingSet, field: str, empty: float) -> torch.Tensor | None:
    """Both sets' per-patch labels ``field``, filled with ``empty`` (no label) for a set built without them;
    None when neither has any."""
    parts = [getattr(s, field) for s in (first, second)]
    like = next((t for t in parts if t is not None), None)
    if like is None:
        return None
    return torch.cat([t if t is not None else torch.full((len(s), *like.shape[1:]), empty, dtype=like.dtype)
                      for s, t in zip((first, second), parts)])  # fmt: skip


def target_map(sample: Sample, grid: int) -> torch.Tensor:
    """[V, grid²] per camera image: where the sample's ``target_uvs`` point (``uv_map``)."""
    return torch.from_numpy(uv_map(getattr(sample, "target_uvs", ()), sample.images, grid, "target_uvs"))


def uv_map(uvs: Sequence[tuple[float, float] | None], images: Sequence[np.ndarray], grid: int, what: str) -> np.ndarray:
    """[V, grid²] per camera image: where ``uvs`` point (one per camera, None: out of view), spread bilinearly
    over the centres of the four nearest patches of a ``grid`` x ``grid`` grid (row-major; the expected patch
    centre is the point itself away from the border), so the label keeps the position inside a patch; zeros
    where nothing is pointed at. ``what`` names the field in errors."""
    out = np.zeros((len(images), grid * grid), dtype=np.float32)  # numpy: per-element torch writes are slow
    for view, uv in enumerate(uvs):
        if uv is None:
            continue
        if view >= len(images):
            raise ValueError(f"{what} has {len(uvs)} entries for {len(images)} images")
        height, width = images[view].shape[:2]
        if height != width:  # the runtime pads non-square images: fractions of the camera image are not the model's
            raise ValueError(f"{what} needs square camera images, got {width}x{height} for image {view}")
        if not all(0.0 <= c < 1.0 for c in uv):
            raise ValueError(f"{what} {uv} of image {view} lies outside it (fractions in [0, 1) expected)")
        # patch centres sit at (i + 0.5) / grid: grid coordinates of the point, clamped to the outer centres
        x, y = (min(max(c * grid - 0.5, 0.0), grid - 1.0) for c in uv)
        for row, wy in _neighbours(y, grid):
            for col, wx in _neighbours(x, grid):
                out[view, row * grid + col] += wx * wy
    return out


def read_maps(sample: Sample, grid: int, task_names: Sequence[str]) -> torch.Tensor:
    """[K, READS, V·grid² + 1]: per text task of ``task_names``, per read, where the object the task's text has
    to look at appears in the camera images (the sample's ``text_uvs`` through ``uv_map``, image after image),
    then one more entry (``ELSEWHERE``), 1 for a read that finds no object (a ``text_uvs`` read of None: the
    look goes to no image); zeros: no read."""
    reads = getattr(sample, "text_uvs", {})
    views = len(sample.images)
    out = np.zeros((len(task_names), READS, views * grid * grid + 1), dtype=np.float32)
    for k, name in enumerate(task_names):
        hops = reads.get(name, ())
        if len(hops) > READS:
            raise ValueError(f"text_uvs of {name!r} has {len(hops)} reads; at most {READS}")
        for hop, uvs in enumerate(hops):
            if uvs is None:
                out[k, hop, ELSEWHERE] = 1.0
            else:
                out[k, hop, :-1] = uv_map(uvs, sample.images, grid, f"text_uvs[{name!r}]").reshape(-1)
    return torch.from_numpy(out)


def object_labels(sample: Sample, grid: int, names: Sequence[str]) -> torch.Tensor:
    """long [V, grid²] per camera image: at the patch where an object's centre lies (``object_uvs``), the
    index of its name in ``names``; IGNORE at every other patch, at a patch holding two centres, and for
    names not in ``names``."""
    out = np.full((len(sample.images), grid * grid), IGNORE, dtype=np.int64)
    for view, seen in enumerate(getattr(sample, "object_uvs", ())):
        if view >= len(sample.images):
            raise ValueError(f"object_uvs has {len(sample.object_uvs)} entries for {len(sample.images)} images")  # type: ignore[attr-defined]
        taken: set[int] = set()
        for u, v, name in seen:
            if not (0.0 <= u < 1.0 and 0.0 <= v < 1.0):
                raise ValueError(f"object_uvs ({u}, {v}) of image {view} lies outside it (fractions in [0, 1) expected)")
            patch = int(v * grid) * grid + int(u * grid)
            if patch in taken:  # two objects in one patch: it names neither
                out[view, patch] = IGNORE
                continue
            taken.add(patch)
            out[view, patch] = names.index(name) if name in names else IGNORE
    return torch.from_numpy(out)


def _neighbours(x: float, grid: int) -> list[tuple[int, float]]:
    """The integers around ``x`` (in [0, grid - 1]) with their linear-interpolation weights."""
    low = int(x)
    frac = x - low
    return [(low, 1.0 - frac)] + ([(low + 1, frac)] if low + 1 < grid else [])


def _to_uint8(pixels: torch.Tensor) -> torch.Tensor:
    """Invert ``u / 255 * 2 - 1`` exactly (every model input pixel came from a uint8)."""
    return ((pixels + 1.0) / 2.0 * 255.0).round().clamp(0, 255).to(torch.uint8)


def pixels_from_uint8(u: torch.Tensor) -> torch.Tensor:
    """The runtime's image scaling (``preprocess.image_to_tensor``) applied to stored uint8 pixels."""
    return u.to(torch.float32) / 255.0 * 2.0 - 1.0


def build_training_set(
    samples: Sequence[Sample], runtime: PolicyRuntime, task_names: Sequence[str], delta_mask: Sequence[bool] = (),
    progress: bool = False, object_names: Sequence[str] = (), prompt_dropout: float = 0.0, seed: int = 0,
    with_reads: bool = False, workers: int = 1,
) -> TrainingSet:
    """Preprocess every sample with ``runtime.make_frame``; text targets are ``" " + text`` then EOS; action
    targets normalized after DeltaActions with ``delta_mask``; with ``object_names``, the recognition labels;
    with ``prompt_dropout``, the prompts tokenized with that BPE-dropout (``Tokenizer.sampling``, seeded by
    ``seed``; targets and continuations keep the canonical tokens the model reads and writes when served);
    with ``with_reads``, the pointing loss's read maps of the samples' ``text_uvs``.
    Consecutive samples holding the very same image arrays (goal alternatives of one tick) store their pixels
    once. ``workers`` forked processes preprocess consecutive parts (the same samples in the same order for
    any number; one with ``prompt_dropout``, whose draws follow the sample order)."""
    norm = runtime.normalizer
    if norm is None:
        raise ValueError("the runtime needs the norm stats of the training data")
    tasks = {t.name: t for t in runtime.engine.tasks}
    missing = [n for n in task_names if n not in tasks and n != ASK_TASK]
    if missing:
        raise ValueError(f"text tasks {missing} are not configured in the runtime (has {sorted(tasks)})")
    if norm.action_dim != runtime.model_config.action_dim:
        raise ValueError(f"the data has {norm.action_dim} action dims; the model config has {runtime.model_config.action_dim}")
    if not samples:
        raise ValueError("no training samples")
    workers = 1 if prompt_dropout else max(1, min(workers, len(samples)))
    bounds = [len(samples) * w // workers for w in range(workers + 1)]
    options = _BuildOptions(runtime, tuple(task_names), tuple(delta_mask), tuple(object_names), prompt_dropout, seed, with_reads)
    parts = _forked_map(functools.partial(_build_portable, samples, options), list(zip(bounds, bounds[1:])), len(samples),
                        "preprocessing", progress)  # fmt: skip
    return functools.reduce(operator.add, map(_from_portable, parts))


def _build_portable(*args: Any, made: Callable[[], object]) -> dict[str, Any]:
    """``_build_part`` with every tensor as a numpy array: torch's multiprocessing pickler would give each of
    the many small tensors (prompts, texts) a shared-memory segment of its own, slower than the preprocessing."""
    part = _build_part(*args, made=made)
    return {f.name: _map_arrays(getattr(part, f.name), torch.Tensor.numpy) for f in fields(part) if f.init and f.name != "layouts"}


def _from_portable(part: dict[str, Any]) -> TrainingSet:
    return TrainingSet(**{name: _map_arrays(value, torch.from_numpy) for name, value in part.items()})


def _map_arrays(value: Any, convert: Callable[[Any], Any]) -> Any:
    """``value`` with ``convert`` applied to every tensor or array in it (in lists, at any depth)."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return convert(value)
    if isinstance(value, list):
        return [_map_arrays(v, convert) for v in value]
    return value


@dataclass(frozen=True)
class _BuildOptions:
    runtime: PolicyRuntime
    task_names: tuple[str, ...]
    delta_mask: tuple[bool, ...]
    object_names: tuple[str, ...]
    prompt_dropout: float
    seed: int
    with_reads: bool


def _build_part(samples: Sequence[Sample], o: _BuildOptions, start: int, stop: int, made: Callable[[], object]) -> TrainingSet:
    """``build_training_set`` of ``samples[start:stop]``."""
    runtime, task_names = o.runtime, o.task_names
    norm, cfg, tok = runtime.normalizer, runtime.model_config, runtime.tokenizer
    assert norm is not None
    tasks = {t.name: t for t in runtime.engine.tasks}
    grid = cfg.vision.image_size // cfg.vision.patch_size
    pixels, image_index, prompts, texts, actions, maps, questions, objects, reads = [], [], [], [], [], [], [], [], []
    slots: torch.Tensor | None = None
    previous_images: tuple | None = None
    prompt_tok = tok.sampling(o.prompt_dropout, o.seed) if o.prompt_dropout else tok
    for i in range(start, stop):
        s = samples[i]
        if s.actions.shape != (cfg.action_horizon, cfg.action_dim):
            raise ValueError(f"sample {i}: action chunk {s.actions.shape}, the model needs ({cfg.action_horizon}, {cfg.action_dim})")
        with _prompts_by(runtime, prompt_tok):
            frame = runtime.make_frame(list(s.images), s.state, s.instruction, stamp_ns=0, frame_seq=0)
        if slots is None:
            slots = frame.image_mask.cpu()
        elif not torch.equal(slots, frame.image_mask.cpu()):
            raise ValueError(f"sample {i}: its cameras fill other image slots than the first sample's")
        shared = previous_images is not None and len(s.images) == len(previous_images) and all(
            a is b for a, b in zip(s.images, previous_images))
        if not shared:
            valid = frame.images.cpu()[slots]
            stored = _to_uint8(valid)
            if not torch.equal(pixels_from_uint8(stored), valid):
                raise AssertionError("image preprocessing is no longer a uint8 → [-1, 1] scaling; store floats instead")
            pixels.append(stored)
        previous_images = tuple(s.images)
        image_index.append(len(pixels) - 1)
        prompts.append(frame.prompt_tokens.cpu())
        question = getattr(s, "question", "")
        texts.append([_target(tok, s.texts.get(n, ""), cfg.eos_token_id, n != ASK_TASK or bool(question)) for n in task_names])
        questions.append(torch.tensor(continuation_tokens(tok, QUESTION_TEMPLATE.format(question=question)) if question else [],
                                      dtype=torch.long))  # fmt: skip
        actions.append(norm.normalize_actions(relative_actions(s, o.delta_mask, runtime.adapter)))
        maps.append(target_map(s, grid))
        if o.object_names:
            objects.append(object_labels(s, grid, o.object_names))
        if o.with_reads:
            reads.append(read_maps(s, grid, task_names))
        made()
    assert slots is not None
    return TrainingSet(
        pixels=torch.stack(pixels),
        image_index=torch.tensor(image_index, dtype=torch.long),
        image_slots=slots,
        prompts=prompts,
        texts=texts,
        actions=torch.from_numpy(np.stack(actions)),
        continuations=[torch.tensor(tasks[n].continuation if n in tasks else [], dtype=torch.long) for n in task_names],
        target_maps=torch.stack(maps),
        question_task=list(task_names).index(ASK_TASK) if ASK_TASK in task_names else -1,
        questions=questions if ASK_TASK in task_names else None,
        object_labels=torch.stack(objects) if o.object_names else None,
        read_maps=torch.stack(reads) if reads and any(getattr(samples[i], "text_uvs", None) for i in range(start, stop)) else None,
    )


@contextmanager
def _prompts_by(runtime: PolicyRuntime, tokenizer: Any) -> Iterator[None]:
    """``runtime.make_frame`` tokenizes its prompts with ``tokenizer`` inside the block."""
    served = runtime.tokenizer
    runtime.tokenizer = tokenizer
    try:
        yield
    finally:
        runtime.tokenizer = served


def _target(tok: Any, text: str, eos: int, present: bool) -> torch.Tensor:
    """Target ids of a text: " " + text then EOS; none where the sample has no such text (an unasked question)."""
    return torch.tensor(tok.encode(" " + text) + [eos] if present else [], dtype=torch.long)
