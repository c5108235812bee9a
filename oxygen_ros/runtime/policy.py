"""PolicyRuntime: the one object the ROS node and the bag tools drive.

It loads the model (a preset with seeded random weights, or a checkpoint), the tokenizer and the
normalization statistics, turns raw observations into model inputs with clear errors, runs the engine in
the configured mode, and returns actions in robot units. No ROS here.

Why one file of this size: it is the one object every tool drives (node, bag tools, simulators, server), and
its loading, observation checks and step/decode calls share its state; the pieces that stand alone live beside it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from oxygen_ros.embodiment import Adapter, AdapterError, ConversionError, adapter_for_asset, make_adapter
from oxygen_ros.engine import Engine, EngineStats, FrameInput, QuestionRefused, TextEvent, TextTask, TickResult, make_runner
from oxygen_ros.engine.allocator import keep_freed_buffers
from oxygen_ros.engine.engine import EngineLanes
from oxygen_ros.engine.modes import OxygenRunner
from oxygen_ros.engine.policy import DeadlinePolicy, FixedTokensPolicy
from oxygen_ros.model.checkpoints.checkpoint import CheckpointError, is_training_checkpoint, load_checkpoint, read_config
from oxygen_ros.model.checkpoints.checkpoint_info import CheckpointInfo, preset_info
from oxygen_ros.model.backends.action_sampler import make_action_sampler
from oxygen_ros.model.backends.compiled import warm_up_rtc
from oxygen_ros.model.backends.compiled_prefill import make_prefiller
from oxygen_ros.model.network.config import ModelConfig, preset
from oxygen_ros.model.checkpoints.key_maps import VARIANTS
from oxygen_ros.model.checkpoints.normalize import Normalizer, NormStatsError, load_norm_stats
from oxygen_ros.model.network.cpu_bfloat16 import cpu_dtype_line, plain_bfloat16, resolve_dtype
from oxygen_ros.model.network.packed_decode import PACK_CHOICES, PACK_LIMIT_BYTES, can_pack, is_packed
from oxygen_ros.model.network.precision import cast_for_inference
from oxygen_ros.model.network.preprocess import ImageError, prepare_images
from oxygen_ros.model.tokenizers.prompt import PromptError, build_prompt_tokens, continuation_tokens
from oxygen_ros.model.tokenizers.tokenizer import Tokenizer, TokenizerError, train_tokenizer
from oxygen_ros.model.tokenizers.tokenizer_hf import load_tokenizer
from oxygen_ros.model.network.vla import Pi05Model

from .chunking import RealTimeChunker, RtcSettings
from .config import RuntimeConfig

log = logging.getLogger(__name__)
TRUNCATION_WARN_EVERY_S = 5.0

# Where LeRobot's TokenizerProcessorStep.save_artifacts writes the tokenizer inside a saved policy.
CHECKPOINT_TOKENIZER = "tokenizer"
QUESTION_TEMPLATE = " Question: {question} Answer:"  # appended after the frame's prefix, like a task prompt


def _progress(message: str) -> None:
    """Start-up progress (compiling the action chunk): on stderr, which ROS 2 launch shows, and in the log."""
    print(f"[oxygen_ros] {message}", file=sys.stderr, flush=True)
    log.info("%s", message)


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
    events: list[TextEvent]  # text produced inside the frame (modes that finish it there; oxygen's overlapped step)


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
        info: CheckpointInfo | None = None,
    ) -> None:
        self.config = config
        self.model = model
        self.model_config: ModelConfig = model.config
        self.tokenizer = tokenizer
        self.normalizer = normalizer
        # What the checkpoint says about running it; ``checkpoint_info.n_action_steps`` is LeRobot's execution length.
        self.checkpoint_info = info or preset_info(model.config)
        self.prompt_format = _resolve_prompt_format(config, self.checkpoint_info)
        self.resize_mode = self.checkpoint_info.resize_mode if config.resize_mode == "auto" else config.resize_mode
        self.adapter = _resolve_adapter(config, self.checkpoint_info)
        self.state_conversions = config.state_conversions()
        self._check_adapter_sizes()
        mask = config.delta_action_mask or self.checkpoint_info.delta_action_mask
        self.delta_action_mask: tuple[bool, ...] | None = tuple(mask) if mask and any(mask) else None
        self.prompts_truncated = 0  # prompts cut to max_prompt_tokens (as openpi and LeRobot do)
        self.last_prompt_truncated = False  # whether the latest make_frame cut its prompt
        self._truncation_warned_at = -float("inf")
        tasks = [
            TextTask(t.name, tuple(continuation_tokens(tokenizer, t.prompt)), t.every_n_frames, t.max_tokens, tuple(t.stop))
            for t in config.tasks
        ]
        # Lanes: the action chunk and an overlapped decode step on threads of their own (oxygen mode).
        self.lanes = EngineLanes(model.device) if config.overlap_decode and config.engine_mode == "oxygen" else None
        build = lambda: warm_up_rtc(make_action_sampler(model, config.action_backend, _progress), config.rtc)  # noqa: E731
        sampler = self.lanes.action.run(build) if self.lanes else build()  # compiled where it will run
        self.engine = Engine(
            model,
            tasks,
            tokenizer,
            kv_budget_bytes=int(config.kv_budget_mb * 1024 * 1024),
            admission=config.admission,
            max_waiting=config.max_waiting,
            seed=config.seed,
            action_sampler=sampler,
            lanes=self.lanes,
            prefiller=make_prefiller(model, config.prefill_backend, _progress),
            # decode steps replayed from CUDA graphs wherever the chunk is one (as oxygen-bench measures them)
            decode_graphs=getattr(sampler, "replays_cuda_graphs", False),
            pack_decode_weights=PACK_CHOICES[config.pack_decode_weights],
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
        self._chunkers: dict[str, RealTimeChunker] = {"": self.chunker}  # per robot served

    def add_robot(self, name: str) -> None:
        """Serve one more robot from this runtime's engine (one model): see :meth:`step_many`."""
        if self.mode not in ("oxygen", "action_only"):
            raise ValueError(f"several robots need engine_mode oxygen or action_only, not {self.mode!r}")
        self.engine.add_robot(name)
        self._chunkers[name] = RealTimeChunker(self.chunker.settings)

    @property
    def robots(self) -> list[str]:
        return self.engine.robots

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
        device = torch.device(config.device)
        dtype = torch.bfloat16 if resolve_dtype(config.dtype, device) == "bfloat16" else torch.float32
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeLoadError(f"device {config.device!r} requested but CUDA is not available")
        if config.checkpoint:
            model, info = cls._load_checkpoint(config, dtype, device)
        else:
            cfg = preset(config.model_preset)
            cfg = cfg.replace(
                action_horizon=config.horizon or cfg.action_horizon, num_denoise_steps=config.denoise_steps or cfg.num_denoise_steps
            )
            torch.manual_seed(config.seed)
            info = preset_info(cfg)
            model = cast_for_inference(Pi05Model(cfg), dtype, info.islands, device).eval()
            log.warning("model preset %r has random weights: its actions and text show the pipeline, not skill", config.model_preset)
        if config.n_action_steps > model.config.action_horizon:  # horizon 0: only the model knows its length
            raise RuntimeLoadError(
                f"n_action_steps {config.n_action_steps} is more than the chunk length {model.config.action_horizon}: "
                f"set it to 1..{model.config.action_horizon}, or 0 for the checkpoint's value (else the whole chunk)"
            )
        tokenizer = cls._load_tokenizer(config, model.config)
        normalizer = cls._load_normalizer(config, info, model.config)
        try:
            runtime = cls(config, model, tokenizer, normalizer, info)
        except AdapterError as exc:
            raise RuntimeLoadError(str(exc)) from None
        runtime._log_choices()
        runtime.warm_up()
        return runtime

    @staticmethod
    def _load_checkpoint(config: RuntimeConfig, dtype: torch.dtype, device: torch.device) -> tuple[Pi05Model, CheckpointInfo]:
        declared = {
            "paligemma_variant": config.paligemma_variant, "action_expert_variant": config.action_expert_variant,
            "action_dim": config.action_dim, "action_horizon": config.horizon,
        }  # fmt: skip
        path = Path(config.checkpoint).expanduser()
        try:
            # The config alone first (cheap): a mismatch is reported before gigabytes of weights are read.
            described, _, _ = read_config(path, declared=declared)
            # A training checkpoint's shape is the declared one; otherwise the parameters must agree with config.json.
            problems = [] if is_training_checkpoint(path) else _declared_mismatches(config, described)
            if problems:
                raise RuntimeLoadError(f"checkpoint {config.checkpoint}: " + "; ".join(problems))
            overrides = {"num_denoise_steps": config.denoise_steps} if config.denoise_steps else None
            loaded = load_checkpoint(path, dtype=dtype, device=device, config_overrides=overrides, declared=declared)
        except (CheckpointError, OSError) as exc:
            raise RuntimeLoadError(f"checkpoint {config.checkpoint}: {exc}") from None
        assert loaded.info is not None
        return loaded.model, loaded.info

    @staticmethod
    def _load_normalizer(config: RuntimeConfig, info: CheckpointInfo, model_config: ModelConfig) -> Normalizer | None:
        """The statistics: the norm_stats file, else the checkpoint's own; none only when asked for (or a preset)."""
        found = info.norm
        explicit = config.norm_mode not in ("auto", "none")
        if config.norm_mode == "none" or (config.norm_mode == "auto" and not config.checkpoint and not config.norm_stats):
            if config.checkpoint:
                log.warning(
                    "norm_mode none: states go into the model and actions come out of it unnormalized; the robot "
                    "receives the model's normalized values (about [-1, 1]) as its commands"
                )
            return None
        # A checkpoint's framework decides the formulas even with the user's own statistics file.
        formula = found.formula if found else ("lerobot" if info.layout == "lerobot" else "openpi")
        try:
            if config.norm_stats:
                path = Path(config.norm_stats).expanduser()
                stats, source, eps = load_norm_stats(path), str(path), found.eps if found else None
                modes = (found.state_mode, found.action_mode) if found else ("quantile", "quantile")
            elif found is not None:
                stats, source, eps, modes = found.stats, found.source, found.eps, (found.state_mode, found.action_mode)
            elif info.norm_choices:
                raise RuntimeLoadError(
                    f"checkpoint {config.checkpoint} has several normalization statistics {list(info.norm_choices)}; "
                    "set norm_stats to the one your robot was trained with"
                )
            elif not config.checkpoint:
                raise RuntimeLoadError(
                    f"norm_mode {config.norm_mode} needs statistics, and model preset {config.model_preset!r} has none: "
                    "set norm_stats: /path/to/norm_stats.json, or norm_mode: auto (none for a preset)"
                )
            else:
                raise RuntimeLoadError(
                    f"no normalization statistics for checkpoint {config.checkpoint}: looked in "
                    f"{'; '.join(info.norm_searched)}. Set norm_stats: /path/to/norm_stats.json (openpi format), or "
                    "norm_mode: none to send the model's normalized actions unchanged"
                )
            if explicit:
                modes = (config.norm_mode, config.norm_mode)
            normalizer = Normalizer(
                stats, mode=modes[0], action_mode=modes[1], formula=formula, eps=eps, source=source  # type: ignore[arg-type]
            )
        except (NormStatsError, OSError) as exc:
            raise RuntimeLoadError(f"norm stats {config.norm_stats or (found.source if found else '')}: {exc}") from None
        if normalizer.action_dim > model_config.action_dim:
            log.info("norm stats describe %d action dims; the model has %d: using the leading entries",
                     normalizer.action_dim, model_config.action_dim)  # fmt: skip
        return normalizer

    def _check_adapter_sizes(self) -> None:
        """An embodiment made for another action or state size is refused at start, with the sizes."""
        a = self.adapter
        if a.action_dim is not None and a.action_dim > self.model_action_dim:
            raise AdapterError(
                f"embodiment {a.name} sends {a.action_dim} action dims, but the checkpoint's actions have "
                f"{self.model_action_dim}: it is made for another robot"
            )
        if a.state_dim is not None and self.normalizer is not None and a.state_dim != self.normalizer.state_dim:
            raise AdapterError(
                f"embodiment {a.name} takes a state of {a.state_dim} values, but the statistics describe "
                f"{self.normalizer.state_dim}: it is made for another robot"
            )

    @property
    def dtype(self) -> str:
        """The model's dtype (``auto`` resolved): float32 or bfloat16."""
        return str(self.model.dtype).removeprefix("torch.")

    @property
    def dtype_line(self) -> str:
        """On a CPU, where bfloat16 is asked for or ``auto`` chose: which products run and why; else ""."""
        c = self.config
        if self.model.device.type != "cpu" or (c.dtype != "auto" and self.dtype != "bfloat16"):
            return ""
        return cpu_dtype_line(c.dtype, self.dtype)

    def describe(self) -> str:
        """One line of what was chosen for this checkpoint (the node prints it at start-up)."""
        info = self.checkpoint_info
        steps = f" (n_action_steps {info.n_action_steps})" if info.n_action_steps else ""
        relative = ""
        if self.delta_action_mask is not None:  # only the dims that exist: a mask may be padded to the model's 32
            dims = [i for i, m in enumerate(self.delta_action_mask[: self._delta_dims()]) if m]
            relative = f", delta actions on dims {dim_ranges(dims)} of {self.action_dim}"
        norm = self.normalizer.describe() if self.normalizer else "none"
        head = ", untied text head (lm_head stored apart from the embedding)" if self.model.lm_head is not None else ""
        body = ", " + self.adapter.describe() if self.adapter.name != "none" else ""
        return (
            f"model: {info.layout} layout, chunk length {self.model_config.action_horizon}{steps}, prompt format "
            f"{self.prompt_format}, resize {self.resize_mode}, statistics {norm}{relative}{head}{body}"
        )

    def _log_choices(self) -> None:
        info, c = self.checkpoint_info, self.config
        log.info("%s", self.describe())
        if self.dtype_line:  # which products this CPU runs, and why: a warning where bfloat16 runs slowly
            log.log(logging.WARNING if plain_bfloat16(self.dtype) else logging.INFO, "%s", self.dtype_line)
        if c.checkpoint and c.prompt_format == "auto" and info.prompt_format is None:
            log.warning("prompt_format auto: using %s; %s. Set prompt_format explicitly.", self.prompt_format, info.prompt_format_note)
        if self.engine.packed_decode_bytes:
            log.info("decode steps multiply by weights packed for oneDNN: %.0f MB more memory (pack_decode_weights %s)",
                     self.engine.packed_decode_bytes / 1e6, c.pack_decode_weights)
        elif c.pack_decode_weights == "auto" and can_pack(self.model.text_head_weight) and not is_packed(self.model):
            log.info("decode weights not packed for oneDNN: the copy would pass %d MiB (pack_decode_weights 'on' "
                     "packs it anyway)", PACK_LIMIT_BYTES >> 20)

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
            saved = Path(config.checkpoint).expanduser() / CHECKPOINT_TOKENIZER if config.checkpoint else None
            if config.tokenizer:
                tokenizer = load_tokenizer(Path(config.tokenizer).expanduser())
            elif saved is not None and saved.is_dir():
                log.info("tokenizer: %s (saved with the checkpoint)", saved)
                tokenizer = load_tokenizer(saved)
            elif config.checkpoint:
                raise RuntimeLoadError(
                    "a checkpoint needs its tokenizer and has none in its tokenizer/ folder: set 'tokenizer' to the "
                    "PaliGemma SentencePiece model (paligemma_tokenizer.model) or a Hugging Face tokenizer folder "
                    "(tokenizer.json)"
                )
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
    def model_action_dim(self) -> int:
        """Dimensions of the unnormalized actions (the statistics' width, at most the model's)."""
        if self.normalizer is None:
            return self.model_config.action_dim
        return min(self.normalizer.action_dim, self.model_config.action_dim)

    @property
    def action_dim(self) -> int:
        """Dimensions of the published actions: what the embodiment sends, else every unnormalized one."""
        return self.adapter.action_dim or self.model_action_dim

    @property
    def n_action_steps(self) -> int:
        """Actions of a chunk executed before the next replaces it: the configured value, else the
        checkpoint's, else the whole chunk (never more than the horizon)."""
        horizon = self.model_config.action_horizon
        return min(horizon, self.config.n_action_steps or self.checkpoint_info.n_action_steps or horizon)

    @property
    def state_dim(self) -> int | None:
        """The widest state the statistics describe (a narrower state uses their leading entries)."""
        return self.normalizer.state_dim if self.normalizer else None

    @property
    def needs_state(self) -> bool:
        """Whether frames need the joint state (state in the prompt, or actions relative to it)."""
        return self.prompt_format == "pi05_state" or self.delta_action_mask is not None

    @property
    def image_slot_names(self) -> tuple[str, ...]:
        """The checkpoint's name for each image slot, in prefix order (LeRobot input_features, openpi cameras)."""
        return self.checkpoint_info.image_features

    def make_frame(
        self, images: Sequence[np.ndarray | None], state: np.ndarray | None, instruction: str, stamp_ns: int, frame_seq: int | None = None
    ) -> FrameInput:
        """Raw observation → model inputs; raises :class:`InputError` saying what is wrong."""
        slots = list(images) + [None] * (self.num_image_slots - len(images))
        try:
            pixels, mask = prepare_images(slots, self.model_config, self.resize_mode)  # type: ignore[arg-type]
        except ImageError as exc:
            raise InputError("image", str(exc)) from None
        text = (instruction or "").strip()
        if not text:
            raise InputError("instruction", "the instruction is empty")
        if self.needs_state and state is None:
            why = "the prompt format 'pi05_state'" if self.prompt_format == "pi05_state" else "delta actions"
            raise InputError("state", f"{why} needs the robot state (joint positions)")
        if state is not None:
            state = np.asarray(state, dtype=np.float64)
            if state.ndim != 1 or not np.all(np.isfinite(state)):
                raise InputError("state", "the robot state must be a finite 1-D vector")
            if self.needs_state:  # into the model's space, before normalization (unused otherwise)
                try:
                    if self.state_conversions is not None:  # the robot's units → the adapter's, as its driver reports
                        state = self.state_conversions.to_model(state)
                    state = self.adapter.state_in(state)
                except (AdapterError, ConversionError) as exc:
                    raise InputError("state", str(exc)) from None
            if self.delta_action_mask is not None and state.shape[0] < self._delta_dims():
                raise InputError("state", f"delta actions add the state back to {self._delta_dims()} action dims; the state has {state.shape[0]}")
        state_norm = None
        if self.prompt_format == "pi05_state":
            try:
                # Not clipped: like openpi and LeRobot, a value below q01 becomes bin -1.
                state_norm = self.normalizer.normalize_state(state) if self.normalizer else state
            except NormStatsError as exc:
                raise InputError("state", str(exc)) from None
        try:
            prompt = build_prompt_tokens(
                self.tokenizer, text, state_norm, self.prompt_format, max_tokens=self.model_config.max_prompt_tokens, truncate=True  # type: ignore[arg-type]
            )
        except PromptError as exc:
            raise InputError("instruction", str(exc)) from None
        self.last_prompt_truncated = prompt.truncated
        if prompt.truncated:
            self._note_truncation(len(self.tokenizer.encode(prompt.text, add_bos=True)))
        seq = self.engine.stats().ticks if frame_seq is None else frame_seq
        device = self.model.device
        tokens = torch.tensor(prompt.ids, dtype=torch.long, device=device)
        return FrameInput(pixels.to(device), mask.to(device), tokens, stamp_ns, seq, robot_state=state)

    def _note_truncation(self, length: int) -> None:
        self.prompts_truncated += 1
        now = time.monotonic()
        if now - self._truncation_warned_at >= TRUNCATION_WARN_EVERY_S:
            self._truncation_warned_at = now
            log.warning(
                "prompt of %d tokens cut to max_prompt_tokens %d, as openpi and LeRobot do (%d prompts cut so far); "
                "shorten the instruction", length, self.model_config.max_prompt_tokens, self.prompts_truncated,
            )  # fmt: skip

    def _delta_dims(self) -> int:
        assert self.delta_action_mask is not None
        return min(len(self.delta_action_mask), self.model_action_dim)

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

    def step_many(self, frames: Mapping[str, FrameInput], step_period_s: Mapping[str, float] | float | None = None,
                  latency_s: Mapping[str, float] | float = 0.0, exact: bool = False) -> dict[str, StepResult]:
        """One tick of several robots (names from :meth:`add_robot`; ``""`` the first) in one engine tick: their
        chunks in one batched call, their text forked from their own frames. Robots absent from ``frames``
        are not served (not due, or no usable inputs). Text advances in :meth:`decode`, for all robots (with
        lanes, one decode step also runs beside the chunks: its events, every robot's, come in the results).
        ``step_period_s`` and ``latency_s``: one for all robots or one per robot (robots at their own rates).
        ``exact``: each chunk bit for bit the one-robot one (``Engine.tick_many``)."""
        if self.mode not in ("oxygen", "action_only"):
            raise ValueError(f"several robots need engine_mode oxygen or action_only, not {self.mode!r}")
        for name, frame in frames.items():
            period = step_period_s.get(name) if isinstance(step_period_s, Mapping) else step_period_s
            if period:
                latency = latency_s if isinstance(latency_s, (int, float)) else latency_s.get(name, 0.0)
                frame.guide = self._chunker(name).guide(frame.stamp_ns, period, latency)
        ticks = self.engine.tick_many(frames, tasks=[] if self.mode == "action_only" else None, exact=exact,
                                      decode_during_action=self.lanes is not None)
        out = {}
        for name, tick in ticks.items():
            out[name] = self._in_robot_units(tick, frames[name], tick.events)
            self._chunker(name).record(frames[name].stamp_ns, tick.actions)
        return out

    def _chunker(self, robot: str) -> RealTimeChunker:
        try:
            return self._chunkers[robot]
        except KeyError:
            raise ValueError(f"unknown robot {robot!r}; this runtime serves {self.robots}") from None

    def start_episode(self, seed: int, robot: str = "") -> None:
        """A robot starts an episode (a simulator's): the action noise seeded by the episode's seed, so its chunks
        do not depend on the episodes before it; the text tasks' schedule from the first tick; no chunk to
        continue."""
        self.engine.robot(robot).generator.manual_seed(seed)
        self.engine.restart_schedule(robot)
        self.forget_chunk(robot)

    def forget_chunk(self, robot: str = "") -> None:
        """The last chunk was not executed (e.g. not published): the next one is not guided toward it."""
        self._chunker(robot).reset()

    def _step(self, frame: FrameInput) -> StepResult:
        if isinstance(self.runner, OxygenRunner):
            tick = self.engine.tick(frame, decode_during_action=self.lanes is not None)
            events = tick.events
        else:
            report = self.runner.frame(frame)
            tick, events = report.tick, report.events
        return self._in_robot_units(tick, frame, events)

    def _in_robot_units(self, tick: TickResult, frame: FrameInput, events: list[TextEvent]) -> StepResult:
        actions = self.normalizer.unnormalize_actions(tick.actions) if self.normalizer else np.asarray(tick.actions, np.float64)
        if self.delta_action_mask is not None and frame.robot_state is not None:
            # openpi AbsoluteActions / LeRobot AbsoluteActionsProcessorStep: masked dims are relative to the state.
            dims = self._delta_dims()
            mask = np.asarray(self.delta_action_mask[:dims])
            actions = actions.copy()
            actions[..., :dims] += np.where(mask, frame.robot_state[:dims], 0.0)
        actions = self.adapter.actions_out(actions)  # the robot's commands (openpi's output transforms)
        return StepResult(tick, np.asarray(actions, dtype=np.float32), events)

    def decode(self, deadline: float | None = None) -> list[TextEvent]:
        """Advance live text between ticks: k steps, or as many as fit before ``deadline`` (monotonic)."""
        if not isinstance(self.runner, OxygenRunner):
            return []
        if isinstance(self._decoder, FixedTokensPolicy):
            return self._decoder.run(self.engine)
        return self._decoder.run(self.engine, deadline if deadline is not None else time.monotonic())

    def close(self) -> list[TextEvent]:
        """Cancel every live request and pending question; returns their final events. The runtime stays usable
        (its lanes, if any, stay up: idle worker threads, joined at interpreter exit)."""
        return self.runner.close()

    # -------------------------------------------------------------------------------------- questions
    def question_tokens(self, question: str) -> list[int]:
        """The continuation tokens of a question; raises InputError when it is empty or cannot fit a prompt."""
        text = question.strip() if isinstance(question, str) else ""
        if not text:
            raise InputError("question", "the question is empty")
        tokens = continuation_tokens(self.tokenizer, QUESTION_TEMPLATE.format(question=text))
        if len(tokens) > self.model_config.max_prompt_tokens:
            raise InputError("question", f"the question has {len(tokens)} tokens, at most "
                                         f"{self.model_config.max_prompt_tokens} fit a prompt")
        return tokens

    def question_refusal(self, n_tokens: int, max_tokens: int, robot: str = "") -> str | None:
        """Why a question for ``robot`` would be refused now (reads counters only: any thread), or None."""
        if self.mode == "action_only":
            return "engine_mode action_only decodes no text"
        return self.engine.question_refusal(n_tokens, max_tokens, robot)

    def ask(self, tokens: Sequence[int], max_tokens: int, robot: str = "") -> int:
        """Queue a question for the robot's next frame; returns its request id (raises QuestionRefused)."""
        if self.mode == "action_only":
            raise QuestionRefused("engine_mode action_only decodes no text")
        return self.engine.ask(tokens, max_tokens, robot=robot)

    def cancel(self, request_id: int) -> list[TextEvent]:
        """Cancel one request or pending question; its final event (empty when it had already ended)."""
        event = self.engine.cancel(request_id)
        return [event] if event is not None else []

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def take_peaks(self) -> tuple[int, int]:
        """Peak KV bytes in use and peak live text requests since the previous call (for /diagnostics)."""
        return self.engine.take_peaks()


def dim_ranges(dims: Sequence[int]) -> str:
    """[0, 1, 2, 3, 4, 5, 7] → "[0..5, 7]"."""
    runs: list[list[int]] = []
    for d in dims:
        if runs and d == runs[-1][1] + 1:
            runs[-1][1] = d
        else:
            runs.append([d, d])
    return "[" + ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs) + "]"


def _resolve_adapter(config: RuntimeConfig, info: CheckpointInfo) -> Adapter:
    name, options = config.embodiment, config.embodiment_options()
    if name == "auto":
        name = adapter_for_asset(info.norm.source if info.norm else None) or "none"
        options = options if name == "aloha" else {}
    return make_adapter(name, options)


def _resolve_prompt_format(config: RuntimeConfig, info: CheckpointInfo) -> str:
    if config.prompt_format != "auto":
        return config.prompt_format
    return info.prompt_format or "pi05_state"  # openpi's default for pi0.5 (discrete_state_input = pi05)


def _declared_mismatches(config: RuntimeConfig, described: ModelConfig) -> list[str]:
    """Parameters that contradict what the checkpoint says (0 / '' = not given)."""
    problems = []
    if config.horizon and config.horizon != described.action_horizon:
        problems.append(
            f"horizon {config.horizon} differs from the checkpoint's chunk length {described.action_horizon} (openpi "
            "action_horizon, LeRobot chunk_size): the action tokens attend to each other, so another length changes "
            f"every action. Leave horizon at 0 (or set {described.action_horizon}); to execute fewer actions of each "
            "chunk use n_action_steps"
        )
    if config.action_dim and config.action_dim != described.action_dim:
        problems.append(f"action_dim {config.action_dim} differs from the checkpoint's {described.action_dim}")
    for name, expert in (("paligemma_variant", described.backbone), ("action_expert_variant", described.expert)):
        value = getattr(config, name)
        if value and VARIANTS[value] != expert:
            problems.append(f"{name} {value} does not match the checkpoint's shape (width {expert.width}, depth {expert.depth})")
    return problems
