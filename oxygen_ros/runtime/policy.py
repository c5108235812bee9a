"""PolicyRuntime: the one object the ROS node and the bag tools drive.

It loads the model (a preset with seeded random weights, or a checkpoint), the tokenizer and the
normalization statistics, turns raw observations into model inputs with clear errors, runs the engine in
the configured mode, and returns actions in robot units. No ROS here.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from oxygen_ros.engine import Engine, EngineStats, FrameInput, TextEvent, TextTask, TickResult, make_runner
from oxygen_ros.engine.allocator import keep_freed_buffers
from oxygen_ros.engine.modes import OxygenRunner
from oxygen_ros.engine.policy import DeadlinePolicy, FixedTokensPolicy
from oxygen_ros.model.checkpoint import CheckpointError, load_checkpoint
from oxygen_ros.model.config import ModelConfig, preset
from oxygen_ros.model.normalize import Normalizer, NormStatsError, find_norm_stats, load_norm_stats
from oxygen_ros.model.preprocess import ImageError, prepare_images
from oxygen_ros.model.prompt import PromptError, build_prompt_tokens, continuation_tokens
from oxygen_ros.model.tokenizer import Tokenizer, TokenizerError, train_tokenizer
from oxygen_ros.model.vla import Pi05Model

from .chunking import RealTimeChunker, RtcSettings
from .config import RuntimeConfig

log = logging.getLogger(__name__)


class RuntimeLoadError(RuntimeError):
    """The model, tokenizer or statistics could not be loaded; the message says which and why."""


class InputError(ValueError):
    """An observation cannot be turned into model inputs. ``kind`` names the input for counters."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class StepResult:
    tick: TickResult
    actions: np.ndarray  # [H, action_dim] float32 in robot units
    events: list[TextEvent]  # text produced inside the frame (modes that finish text within a frame)


def demo_tokenizer_path(vocab_size: int) -> Path:
    """Where the built-in demo tokenizer is cached (trained on first use, in a fraction of a second)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "oxygen_ros"
    return cache / f"demo_tokenizer_{vocab_size}.model"


class PolicyRuntime:
    def __init__(
        self,
        config: RuntimeConfig,
        model: Pi05Model,
        tokenizer: Tokenizer,
        normalizer: Normalizer | None,
        checkpoint_n_action_steps: int | None = None,
    ) -> None:
        self.config = config
        self.checkpoint_n_action_steps = checkpoint_n_action_steps
        self.model = model
        self.model_config: ModelConfig = model.config
        self.tokenizer = tokenizer
        self.normalizer = normalizer
        tasks = [
            TextTask(t.name, tuple(continuation_tokens(tokenizer, t.prompt)), t.every_n_frames, t.max_tokens, tuple(t.stop))
            for t in config.tasks
        ]
        self.engine = Engine(
            model,
            tasks,
            tokenizer,
            kv_budget_bytes=int(config.kv_budget_mb * 1024 * 1024),
            admission=config.admission,
            max_waiting=config.max_waiting,
            seed=config.seed,
        )
        self.mode = config.engine_mode
        k = config.tokens_per_frame
        # The runner gives each mode its frame semantics; in oxygen mode text advances in decode() instead,
        # between ticks, by this policy (k steps, or as many as fit before the caller's deadline).
        self.runner = make_runner(self.mode, self.engine, tokens_per_frame=k or 1)
        self._decoder = FixedTokensPolicy(k) if k else DeadlinePolicy()
        self.chunker = RealTimeChunker(
            RtcSettings(config.rtc, config.rtc_beta, config.rtc_prefix_attention_horizon, config.rtc_schedule)
        )

    # ------------------------------------------------------------------------------------------ loading
    @classmethod
    def load(cls, config: RuntimeConfig) -> "PolicyRuntime":
        try:
            config.validate()
        except ValueError as exc:
            raise RuntimeLoadError(f"invalid configuration: {exc}") from None
        keep_freed_buffers()
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        dtype = torch.bfloat16 if config.dtype == "bfloat16" else torch.float32
        device = torch.device(config.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeLoadError(f"device {config.device!r} requested but CUDA is not available")
        overrides = {"action_horizon": config.horizon, "num_denoise_steps": config.denoise_steps}
        stats_path: Path | None = Path(config.norm_stats).expanduser() if config.norm_stats else None
        if config.checkpoint:
            try:
                loaded = load_checkpoint(config.checkpoint, dtype=dtype, device=device, config_overrides=overrides)
            except (CheckpointError, OSError) as exc:
                raise RuntimeLoadError(f"checkpoint {config.checkpoint}: {exc}") from None
            model = loaded.model
            if stats_path is None:
                stats_path = loaded.norm_stats_path
        else:
            torch.manual_seed(config.seed)
            model = Pi05Model(preset(config.model_preset).replace(**overrides)).to(device=device, dtype=dtype).eval()
            log.warning("model preset %r has random weights: its actions and text show the pipeline, not skill", config.model_preset)
        tokenizer = cls._load_tokenizer(config, model.config)
        normalizer = None
        if stats_path is not None:
            try:
                normalizer = Normalizer(load_norm_stats(stats_path), mode=config.norm_mode)  # type: ignore[arg-type]
            except (NormStatsError, OSError) as exc:
                raise RuntimeLoadError(f"norm stats {stats_path}: {exc}") from None
            if normalizer.action_dim > model.config.action_dim:
                raise RuntimeLoadError(
                    f"norm stats describe {normalizer.action_dim} action dims; the model has {model.config.action_dim}"
                )
        runtime = cls(config, model, tokenizer, normalizer)
        runtime.warm_up()
        return runtime

    def warm_up(self) -> None:
        """One prefill and one action chunk on a blank observation, so the first real tick does not pay
        for first-call allocations and kernel selection. Leaves no state behind (no tick is counted)."""
        c = self.model_config
        s = c.vision.image_size
        tokens = torch.tensor([c.bos_token_id] + [c.eos_token_id] * 3, device=self.model.device)
        frame = FrameInput(
            torch.zeros(c.num_image_slots, 3, s, s, device=self.model.device),
            torch.ones(c.num_image_slots, dtype=torch.bool, device=self.model.device),
            tokens, stamp_ns=0, frame_seq=-1,
        )
        prefix, _ = self.engine.prefill(frame)
        try:
            self.engine.act(prefix, torch.zeros(c.action_horizon, c.action_dim))
        finally:
            self.engine.kv.release(prefix)

    @staticmethod
    def _load_tokenizer(config: RuntimeConfig, model_config: ModelConfig) -> Tokenizer:
        try:
            if config.tokenizer:
                tokenizer = Tokenizer.from_file(Path(config.tokenizer).expanduser())
            elif config.checkpoint:
                raise RuntimeLoadError("a checkpoint needs its tokenizer: set 'tokenizer' to the PaliGemma SentencePiece model")
            else:
                path = demo_tokenizer_path(model_config.vocab_size)
                tokenizer = Tokenizer.from_file(path) if path.exists() else train_tokenizer(path, model_config.vocab_size)
            c = model_config
            tokenizer.check_compatible(c.vocab_size, c.bos_token_id, c.eos_token_id, c.pad_token_id)
        except TokenizerError as exc:
            raise RuntimeLoadError(f"tokenizer: {exc}") from None
        return tokenizer

    # ------------------------------------------------------------------------------------- observations
    @property
    def num_image_slots(self) -> int:
        return self.model_config.num_image_slots

    @property
    def image_size(self) -> int:
        return self.model_config.vision.image_size

    @property
    def action_dim(self) -> int:
        return self.normalizer.action_dim if self.normalizer else self.model_config.action_dim

    @property
    def n_action_steps(self) -> int:
        """Actions of a chunk executed before the next replaces it: the configured value, else the
        checkpoint's, else the whole chunk (never more than the horizon)."""
        horizon = self.model_config.action_horizon
        return min(horizon, self.config.n_action_steps or self.checkpoint_n_action_steps or horizon)

    @property
    def state_dim(self) -> int | None:
        return self.normalizer.state_dim if self.normalizer else None

    def make_frame(
        self, images: Sequence[np.ndarray | None], state: np.ndarray | None, instruction: str, stamp_ns: int, frame_seq: int | None = None
    ) -> FrameInput:
        """Raw observation → model inputs; raises :class:`InputError` saying what is wrong."""
        slots = list(images) + [None] * (self.num_image_slots - len(images))
        try:
            pixels, mask = prepare_images(slots, self.model_config)
        except ImageError as exc:
            raise InputError("image", str(exc)) from None
        text = (instruction or "").strip()
        if not text:
            raise InputError("instruction", "the instruction is empty")
        state_norm = None
        if self.config.prompt_format == "pi05_state":
            if state is None:
                raise InputError("state", "the prompt format 'pi05_state' needs the robot state (joint positions)")
            state = np.asarray(state, dtype=np.float64)
            if state.ndim != 1 or not np.all(np.isfinite(state)):
                raise InputError("state", "the robot state must be a finite 1-D vector")
            try:
                state_norm = self.normalizer.normalize_state(state, clip=True) if self.normalizer else np.clip(state, -1, 1)
            except NormStatsError as exc:
                raise InputError("state", str(exc)) from None
        try:
            prompt = build_prompt_tokens(
                self.tokenizer, text, state_norm, self.config.prompt_format, max_tokens=self.model_config.max_prompt_tokens  # type: ignore[arg-type]
            )
        except PromptError as exc:
            raise InputError("instruction", str(exc)) from None
        seq = self.engine.stats().ticks if frame_seq is None else frame_seq
        device = self.model.device
        return FrameInput(pixels.to(device), mask.to(device), torch.tensor(prompt.ids, dtype=torch.long, device=device), stamp_ns, seq)

    # ---------------------------------------------------------------------------------------- running
    def step(self, frame: FrameInput, step_period_s: float | None = None, latency_s: float = 0.0) -> StepResult:
        """The critical path of one control tick; in ``oxygen`` mode text advances in :meth:`decode`.

        With real-time chunking on, ``step_period_s`` (time between a chunk's actions) and ``latency_s`` (the
        expected observation-to-execution delay, e.g. the last measured one) let the new chunk continue the
        previous one; without a step period the chunk is sampled plainly.
        """
        if step_period_s:
            frame.guide = self.chunker.guide(frame.stamp_ns, step_period_s, latency_s)
        result = self._step(frame)
        self.chunker.record(frame.stamp_ns, result.tick.actions)
        return result

    def forget_chunk(self) -> None:
        """The last chunk was not executed (e.g. not published): the next one is not guided toward it."""
        self.chunker.reset()

    def _step(self, frame: FrameInput) -> StepResult:
        if isinstance(self.runner, OxygenRunner):
            tick, events = self.engine.tick(frame), []
        else:
            report = self.runner.frame(frame)
            tick, events = report.tick, report.events
        actions = self.normalizer.unnormalize_actions(tick.actions) if self.normalizer else tick.actions
        return StepResult(tick, np.asarray(actions, dtype=np.float32), events)

    def decode(self, deadline: float | None = None) -> list[TextEvent]:
        """Advance live text between ticks: k steps, or as many as fit before ``deadline`` (monotonic)."""
        if not isinstance(self.runner, OxygenRunner):
            return []
        if isinstance(self._decoder, FixedTokensPolicy):
            return self._decoder.run(self.engine)
        return self._decoder.run(self.engine, deadline if deadline is not None else time.monotonic())

    def close(self) -> list[TextEvent]:
        return self.runner.close()

    def stats(self) -> EngineStats:
        return self.engine.stats()
