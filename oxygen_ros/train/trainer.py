"""Train the demo policy on scripted-expert data and write a checkpoint the runtime loads as is.

Order of work: expert episodes → norm stats → a SentencePiece tokenizer of the data's vocabulary → a
``PolicyRuntime`` around the fresh model (its preprocessing turns every sample into model inputs) →
AdamW with warm-up and cosine decay on flow-matching + next-token (+ grounding and recognition) losses → DAgger rounds (the policy drives,
the expert labels what it reaches; each round a short schedule of its own) → checkpoint in the native layout
(``model.safetensors``, ``config.json``, ``assets/demo/norm_stats.json``) + ``tokenizer.model`` + the loss
curves. Every random draw comes from the seed and the optimizer runs torch's deterministic kernels, so one
seed gives one checkpoint (on one machine, with one number of threads).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel
from tqdm import tqdm

from oxygen_ros.embodiment import make_adapter
from oxygen_ros.model.checkpoints.checkpoint import save_checkpoint
from oxygen_ros.model.network.config import ModelConfig
from oxygen_ros.model.network.layers import AdaRMSNorm
from oxygen_ros.model.checkpoints.normalize import Normalizer
from oxygen_ros.model.tokenizers.tokenizer import robot_corpus, train_tokenizer
from oxygen_ros.model.network.vla import Pi05Model
from oxygen_ros.runtime.config import RuntimeConfig
from oxygen_ros.runtime.policy import PolicyRuntime

from .batch import make_batch
from .forward import compute_losses
from .grounding import GroundingHead, PatchHead, PatchHeads
from .data import Sample, SampleSource, TrainingSet, build_training_set, collect_samples, compute_norm_stats, text_corpus
from .plot import plot_losses
from .train_config import TrainConfig

DAGGER_WARMUP_STEPS = 20
TOKENIZER_FILE = "tokenizer.model"
SUMMARY_FILE = "train_summary.json"


@dataclass
class TrainResult:
    out_dir: Path
    history: dict[str, list[float]]
    samples: int
    data_seconds: float
    train_seconds: float
    dagger: list[dict] = field(default_factory=list)  # per round: episodes, successes, samples

    @property
    def final(self) -> dict[str, float]:
        """Mean of the last 50 steps of each loss (a task's: over the steps whose batch had its tokens)."""
        last = {k: [x for x in v[-50:] if not math.isnan(x)] for k, v in self.history.items() if k != "lr"}
        return {k: sum(v) / len(v) for k, v in last.items() if v}


def sincos_2d(grid: int, width: int) -> torch.Tensor:
    """2-D sine-cosine position codes [grid*grid, width] (row-major patches), as MAE initializes ViTs."""
    quarter = width // 4
    omega = 1.0 / 10_000 ** (torch.arange(quarter, dtype=torch.float64) / quarter)
    ys, xs = torch.meshgrid(torch.arange(grid, dtype=torch.float64), torch.arange(grid, dtype=torch.float64), indexing="ij")
    parts = [f(c.reshape(-1, 1) * omega) for c in (ys, xs) for f in (torch.sin, torch.cos)]
    codes = torch.cat(parts, dim=1)
    return torch.nn.functional.pad(codes, (0, width - codes.shape[1])).float()


def init_weights(model: Pi05Model) -> None:
    """Initialization from the global torch RNG: unit-scale token embeddings (they are multiplied by
    √width), 2-D sine-cosine patch positions (learned from there: the policy must find objects in the
    image from the start), and zero adaptive-norm projections so every gated residual of the action expert
    starts closed (adaLN-Zero, as in DiT)."""
    width = model.config.backbone.width
    for module in model.modules():
        if isinstance(module, AdaRMSNorm):
            nn.init.zeros_(module.dense.weight)
            nn.init.zeros_(module.dense.bias)
    nn.init.normal_(model.embed_tokens.weight, std=width**-0.5)
    vision = model.config.vision
    with torch.no_grad():
        model.vision_tower.position_embedding.weight.copy_(sincos_2d(vision.image_size // vision.patch_size, vision.width))


def ema_model(model: Pi05Model, decay: float) -> AveragedModel:
    """A moving average of ``model``'s weights (as diffusion policies keep), its decay warming up as
    min(decay, (1 + n) / (10 + n)) so the first weights do not linger in short runs."""

    def average(avg: Tensor, current: Tensor, n: Tensor) -> Tensor:
        d = min(decay, (1.0 + float(n)) / (10.0 + float(n)))
        return avg * d + current * (1.0 - d)

    return AveragedModel(model, avg_fn=average)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to ``lr * min_lr_ratio``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def runtime_config(cfg: TrainConfig, model_config: ModelConfig) -> RuntimeConfig:
    return RuntimeConfig(
        horizon=model_config.action_horizon, prompt_format=cfg.prompt_format, tasks=list(cfg.tasks), kv_budget_mb=4.0,
        delta_action_mask=cfg.delta_mask(model_config.action_dim), embodiment=cfg.embodiment,
    )


def prepare(
    cfg: TrainConfig, source: SampleSource, out_dir: str | Path, vocabulary: Sequence[str] = (), progress: bool = False
) -> tuple[PolicyRuntime, TrainingSet, dict]:
    """Data, statistics, tokenizer and a runtime around a freshly initialized model."""
    out_dir = Path(out_dir)
    model_config = cfg.model_config()
    image_size = model_config.vision.image_size
    samples = collect_samples(
        source, cfg.seed, cfg.samples, model_config.action_horizon, cfg.control_period_s, image_size, cfg.data_workers,
        progress,
    )
    if not samples:
        raise ValueError("the expert produced no samples")
    # The action expert's width in and out is the robot's: joints + gripper of the data.
    model_config = model_config.replace(action_dim=int(samples[0].actions.shape[-1]))
    delta_mask = cfg.delta_mask(model_config.action_dim)
    adapter = make_adapter(cfg.embodiment)
    stats = compute_norm_stats(samples, delta_mask, adapter)
    normalizer = Normalizer(stats, mode="quantile")
    # The data's own strings plus the built-in robotics corpus, so the vocabulary size is always reachable.
    corpus = text_corpus(samples, normalizer, [t.prompt for t in cfg.tasks], vocabulary, adapter) + robot_corpus()
    tokenizer = train_tokenizer(out_dir / TOKENIZER_FILE, model_config.vocab_size, corpus, cfg.fold_case)
    torch.manual_seed(cfg.seed)
    model = Pi05Model(model_config)
    init_weights(model)
    runtime = PolicyRuntime(runtime_config(cfg, model_config), model, tokenizer, normalizer)
    data = build_training_set(samples, runtime, cfg.text_task_names(), delta_mask, progress, cfg.object_names,
                              cfg.prompt_dropout, cfg.seed, with_reads=bool(cfg.pointing_weight), workers=cfg.data_workers)
    return runtime, data, stats


class OnPolicyResult(Protocol):
    samples: Sequence[Sample]
    episodes: int
    successes: int


# on_policy(runtime, seed, episodes, progress, workers) → the runtime's policy driving episodes (in ``workers``
# processes, the result independent of their number), labelled by the expert
OnPolicySource = Callable[[PolicyRuntime, int, int, bool, int], OnPolicyResult]


def train(
    cfg: TrainConfig,
    source: SampleSource,
    out_dir: str | Path,
    vocabulary: Sequence[str] = (),
    progress: bool = True,
    on_policy: OnPolicySource | None = None,
) -> TrainResult:
    """Train on ``samples`` from ``source`` (the expert); ``vocabulary``: extra strings for the tokenizer;
    then ``cfg.dagger_rounds`` rounds on ``on_policy`` data (DAgger; skipped without ``on_policy``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    runtime, data, stats = prepare(cfg, source, out, vocabulary, progress)
    data_seconds = time.perf_counter() - t0
    model = runtime.model
    depth = model.config.backbone.depth
    if not 0 <= cfg.grounding_at(depth) < depth:
        raise ValueError(f"grounding_layer {cfg.grounding_layer} is not a layer of the {depth}-layer backbone")
    if not -1 <= cfg.recognition_layer < depth:
        raise ValueError(f"recognition_layer {cfg.recognition_layer} is not -1 or a layer of the {depth}-layer backbone")
    heads = patch_heads(cfg, model.config)
    history: dict[str, list[float]] = {"total": [], "flow": [], "text": [], "lr": []}
    save = (lambda m: _save_weights(m, out, stats, cfg)) if cfg.save_every else None
    t1 = time.perf_counter()
    saved = _optimize(model, data, cfg, cfg, torch.Generator().manual_seed(cfg.seed), history, "train", progress, save, heads)
    train_seconds = time.perf_counter() - t1
    rounds: list[dict] = []
    on_policy_sets: TrainingSet | None = None  # every round's on-policy samples so far (DAgger aggregates them)
    round_schedule = replace(cfg, steps=cfg.dagger_steps, lr=cfg.dagger_lr, warmup_steps=min(DAGGER_WARMUP_STEPS, cfg.dagger_steps))
    for r in range(cfg.dagger_rounds if on_policy is not None and min(cfg.dagger_steps, cfg.dagger_episodes) > 0 else 0):
        t2 = time.perf_counter()
        new, fresh, report = _on_policy_round(cfg, r, runtime, saved, source, on_policy, progress)  # type: ignore[arg-type]
        on_policy_sets = new if on_policy_sets is None else on_policy_sets + new
        data_seconds += time.perf_counter() - t2
        with torch.no_grad():  # go on from the averaged weights the rollouts saw, with a fresh optimizer
            for target, value in zip(model.parameters(), saved.parameters()):
                target.copy_(value)
        t3 = time.perf_counter()
        generator = torch.Generator().manual_seed(_round_seed(cfg, r))
        saved = _optimize(model, on_policy_sets + fresh if fresh else on_policy_sets, cfg, round_schedule, generator, history, f"dagger {r + 1}", progress, None, heads)
        train_seconds += time.perf_counter() - t3
        rounds.append(report)
    model.eval().requires_grad_(False)
    saved.eval().requires_grad_(False)
    result = TrainResult(out, history, len(data), data_seconds, train_seconds, rounds)
    save_outputs(cfg, result, saved, stats)
    return result


def patch_heads(cfg: TrainConfig, model_config: ModelConfig) -> PatchHeads | None:
    """The training-only heads the config asks for, each initialized from its own generator (None: neither)."""
    width, layer = model_config.backbone.width, cfg.grounding_at(model_config.backbone.depth)
    point = GroundingHead(width, torch.Generator().manual_seed(cfg.seed)) if cfg.grounding_weight else None
    names = cfg.recognition_weight and cfg.object_names
    name = PatchHead(width, torch.Generator().manual_seed(cfg.seed + 1), len(cfg.object_names)) if names else None
    if point is None and name is None and not cfg.pointing_weight:
        return None
    return PatchHeads(layer, point, cfg.grounding_weight, name, cfg.recognition_weight if name else 0.0, cfg.recognition_layer,
                      cfg.pointing_weight, cfg.pointing_at(model_config.backbone.depth))  # fmt: skip


def _round_seed(cfg: TrainConfig, r: int) -> int:
    return cfg.seed * 1000 + 1 + r


def _on_policy_round(
    cfg: TrainConfig, r: int, runtime: PolicyRuntime, policy: Pi05Model, source: SampleSource, on_policy: OnPolicySource,
    progress: bool,
) -> tuple[TrainingSet, TrainingSet | None, dict]:
    """Round ``r``'s data: ``policy`` (the averaged weights) drives ``cfg.dagger_episodes`` episodes labelled
    by the expert (the first set), and ``cfg.dagger_fresh_samples`` new expert samples (the second: the
    round does not forget the expert's own states); a report for the summary."""
    policy.eval().requires_grad_(False)
    rollout = PolicyRuntime(
        replace(runtime.config, engine_mode="action_only"), policy, runtime.tokenizer, runtime.normalizer
    )
    got = on_policy(rollout, _round_seed(cfg, r), cfg.dagger_episodes, progress, cfg.data_workers)
    if not got.samples:
        raise ValueError(f"DAgger round {r + 1}: the on-policy episodes produced no samples")
    c = runtime.model_config
    fresh = collect_samples(source, _round_seed(cfg, r), cfg.dagger_fresh_samples, c.action_horizon, cfg.control_period_s,
                            c.vision.image_size, cfg.data_workers, progress)  # fmt: skip
    tasks = cfg.text_task_names()
    delta_mask = cfg.delta_mask(c.action_dim)
    report = {
        "round": r + 1, "episodes": got.episodes, "successes": got.successes, "on_policy_samples": len(got.samples),
        "fresh_samples": len(fresh),
    }  # fmt: skip
    if progress:
        print(f"DAgger round {r + 1}: the policy solved {got.successes}/{got.episodes} training episodes; "
              f"{len(got.samples)} on-policy samples + {len(fresh)} expert samples", flush=True)  # fmt: skip
    build = partial(build_training_set, runtime=runtime, task_names=tasks, delta_mask=delta_mask, progress=progress,
                    object_names=cfg.object_names, prompt_dropout=cfg.prompt_dropout, seed=_round_seed(cfg, r),
                    with_reads=bool(cfg.pointing_weight), workers=cfg.data_workers)  # fmt: skip
    fresh_set = build(fresh) if fresh else None
    return build(got.samples), fresh_set, report


@contextmanager
def deterministic_kernels() -> Iterator[None]:
    """Torch's deterministic kernels inside the block (the caller's setting after it). On the CPU, the backward
    of a gather with repeated indices (the pointing loss reads a sample's keys once per look) otherwise sums
    with atomic adds in whatever order the threads come: on a busy 2-core machine, 1 to 3 of 30 gradients of
    one and the same batch came out different, and three runs of the recipe wrote three checkpoints."""
    enabled, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def _optimize(
    model: Pi05Model,
    data: TrainingSet,
    cfg: TrainConfig,
    schedule: TrainConfig,
    generator: torch.Generator,
    history: dict[str, list[float]],
    desc: str,
    progress: bool,
    save: Callable[[Pi05Model], None] | None,
    heads: PatchHeads | None = None,
) -> Pi05Model:
    """``schedule.steps`` AdamW steps on ``data`` (learning rate from ``schedule``), with the grounding and
    recognition losses of ``heads`` (trained along, never saved); returns the model to save: the moving average
    of the weights (or the weights themselves without one)."""
    model.train().requires_grad_(True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2] + (heads.parameters() if heads else [])
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=schedule.lr, betas=(0.9, 0.95),
    )
    c = model.config
    ema = ema_model(model, cfg.ema_decay) if cfg.ema_decay > 0 else None
    saved = model if ema is None else ema.module
    with deterministic_kernels():
        bar = tqdm(range(schedule.steps), desc=desc, disable=not progress, dynamic_ncols=True)
        for step in bar:
            lr = lr_at(step, schedule)
            for group in optimizer.param_groups:
                group["lr"] = lr
            index = torch.randint(len(data), (cfg.batch_size,), generator=generator)
            batch = make_batch(data, index, c.tokens_per_image, c.pad_token_id, cfg.flow_samples)
            losses = compute_losses(model, batch, generator, cfg.text_weight, cfg.flow_weight, heads)
            optimizer.zero_grad(set_to_none=True)
            losses.total.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            if ema is not None:
                ema.update_parameters(model)
            for key, value in (("total", losses.total), ("flow", losses.flow), ("text", losses.text)):
                history[key].append(float(value.detach()))
            # Each task's own curve: the plateau before grounding is in the tasks that need the images (README).
            per_task = losses.per_task.tolist() if losses.per_task is not None else []
            names = cfg.text_task_names()
            for task, value in zip(names, per_task + [math.nan] * (len(names) - len(per_task))):
                history.setdefault(f"text_{task}", []).append(value)
            for key, value in (("grounding", losses.grounding), ("recognition", losses.recognition), ("pointing", losses.pointing)):
                if value is not None:
                    history.setdefault(key, []).append(float(value.detach()))
            history["lr"].append(lr)
            bar.set_postfix(flow=f"{history['flow'][-1]:.4f}", text=f"{history['text'][-1]:.3f}", lr=f"{lr:.1e}")
            if save is not None and cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < schedule.steps:
                save(saved)
    return saved


def _save_weights(model: Pi05Model, out: Path, stats: dict, cfg: TrainConfig) -> None:
    delta_mask = cfg.delta_mask(model.config.action_dim)
    save_checkpoint(model, out, layout="oxygen", norm_stats=stats, asset_id=cfg.asset_id, delta_action_mask=delta_mask or None)


def summary(cfg: TrainConfig, result: TrainResult) -> dict:
    """What ``train_summary.json`` records: the settings, the data, the time, the final losses, the rounds."""
    steps = len(result.history["total"])
    return {
        "config": {k: v for k, v in asdict(cfg).items() if k not in ("tasks", "model")},
        "tasks": [asdict(t) for t in cfg.tasks],
        "steps": steps,
        "samples": result.samples,
        "data_seconds": round(result.data_seconds, 1),
        "train_seconds": round(result.train_seconds, 1),
        "steps_per_second": round(steps / max(result.train_seconds, 1e-9), 3),
        "final_losses": {k: round(v, 5) for k, v in result.final.items()},
        "torch_threads": torch.get_num_threads(),
        "dagger_rounds": result.dagger,
    }


def save_outputs(cfg: TrainConfig, result: TrainResult, model: Pi05Model, stats: dict) -> None:
    out = result.out_dir
    stored = model.to(torch.bfloat16) if cfg.dtype == "bfloat16" else model
    _save_weights(stored, out, stats, cfg)
    plot_losses(result.history, out / "losses.png")
    (out / SUMMARY_FILE).write_text(json.dumps(summary(cfg, result), indent=2))
