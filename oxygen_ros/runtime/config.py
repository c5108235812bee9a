"""Runtime configuration: everything the node's parameters and the replay tools' YAML can set."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oxygen_ros.embodiment import ADAPTERS, Conversions, parse_conversions
from oxygen_ros.engine.mode_names import MODES
from oxygen_ros.model.network.choices import (ACTION_BACKENDS, DTYPE_CHOICES, PACK_CHOICES, PREFILL_BACKENDS, RESIZE_MODES,
                                             SCHEDULES)
from oxygen_ros.model.network.config import PRESETS
from oxygen_ros.model.checkpoints.key_maps import VARIANTS
from oxygen_ros.model.tokenizers.prompt import PROMPT_FORMATS

from .alignment import REPLAN, TIME_ALIGNMENTS

# "auto" = as the checkpoint's own framework does it (see PolicyRuntime.load).
NORM_MODE_CHOICES = ("auto", "quantile", "mean_std", "none")
PROMPT_FORMAT_CHOICES = ("auto", *PROMPT_FORMATS)
RESIZE_MODE_CHOICES = ("auto", *RESIZE_MODES)


@dataclass
class TaskConfig:
    """A text task: its continuation prompt, how often it starts and how long it may run."""

    name: str
    prompt: str
    every_n_frames: int = 1
    max_tokens: int = 30
    stop: list[str] = field(default_factory=list)


def default_tasks() -> list[TaskConfig]:
    return [
        TaskConfig("language", " Subtask:", every_n_frames=1, max_tokens=12),
        TaskConfig("memory", " Memory:", every_n_frames=10, max_tokens=20),
    ]


@dataclass
class RuntimeConfig:
    model_preset: str = "tiny"
    checkpoint: str = ""
    tokenizer: str = ""
    norm_stats: str = ""
    norm_mode: str = "auto"
    device: str = "cpu"
    # "auto": bfloat16 on CUDA and on a CPU that runs it natively (AVX512-BF16, AMX), float32 elsewhere, where
    # bfloat16 is the slower dtype (model/network/cpu_bfloat16.py); "bfloat16" runs on any CPU.
    dtype: str = "float32"
    horizon: int = 0  # 0 = the checkpoint's chunk length (a preset's action_horizon)
    denoise_steps: int = 0  # 0 = the checkpoint's (LeRobot num_inference_steps; 10 otherwise)
    prompt_format: str = "auto"
    resize_mode: str = "auto"
    delta_action_mask: list[bool] = field(default_factory=list)  # [] = the checkpoint's (LeRobot relative actions)
    # The shape of an openpi training checkpoint (no config.json); checked against config.json otherwise.
    paligemma_variant: str = ""
    action_expert_variant: str = ""
    action_dim: int = 0
    tasks: list[TaskConfig] = field(default_factory=default_tasks)
    engine_mode: str = "oxygen"
    tokens_per_frame: int = 0
    kv_budget_mb: float = 256.0
    admission: str = "wait"
    max_waiting: int = 16
    seed: int = 0
    num_threads: int = 0  # torch CPU threads; 0 = torch's default (one per core)
    # The action chunk: "compiled" (torch.compile at start-up, eager fallback), "cuda_graph" (a CUDA graph of the
    # compiled network; CUDA only), "auto" (cuda_graph on CUDA, compiled on a CPU) or "eager".
    action_backend: str = "eager"
    # The prefill: "compiled" (torch.compile at start-up, eager fallback), "auto" (compiled on a CPU, eager on
    # CUDA, where the compiled layers measured slower: docs/performance.md, GPU path) or "eager".
    prefill_backend: str = "eager"
    overlap_decode: bool = False  # oxygen mode: one decode step runs on its own thread during the action chunk
    # CPU, bfloat16: the decode step multiplies by a second copy of the decode weights packed for oneDNN
    # (model/network/packed_decode.py): "auto" where the copy fits 1 GiB, "on" whatever it takes, "off" never.
    pack_decode_weights: str = "auto"
    # Chunk execution (runtime/alignment.py, runtime/chunking.py)
    n_action_steps: int = 0  # actions of a chunk executed before the next replaces it; 0 = checkpoint's, else all
    replan: str = "tick"  # "tick": a new chunk every control tick; "n_action_steps": every n_action_steps steps
    time_alignment: str = "stamp"  # "stamp" | "drop" | "none" (see runtime/alignment.py)
    rtc: bool = False  # real-time chunking: guide each chunk's overlap toward the previous chunk
    rtc_beta: float = 5.0  # maximum guidance weight
    rtc_prefix_attention_horizon: int = 0  # rows guided at all; 0 = the whole overlap with the previous chunk
    rtc_schedule: str = "exp"  # prefix weights between the delay and the horizon
    # Robot-side transforms (oxygen_ros/embodiment): "none", "droid", "aloha", "libero", "scale_offset", or
    # "auto" (from the checkpoint's openpi asset id: droid, trossen/aloha, libero; else none).
    embodiment: str = "none"
    adapt_to_pi: bool = True  # aloha: openpi's joint flip mask and gripper conversions (its default)
    unit_scale: list[float] = field(default_factory=list)  # scale_offset: model = robot · scale + offset, per dim
    unit_offset: list[float] = field(default_factory=list)  # [] = zeros
    # Per joint of the state, robot units → the adapter's (oxygen_ros/embodiment/conversions.py); [] = as reported.
    joint_conversions: list[str] = field(default_factory=list)

    def embodiment_options(self) -> dict[str, Any]:
        """The options of the chosen adapter, from the flat fields (ROS parameters cannot hold mappings)."""
        if self.embodiment == "aloha" or self.embodiment == "auto":
            return {"adapt_to_pi": self.adapt_to_pi}
        if self.embodiment == "scale_offset":
            return {"scale": list(self.unit_scale), **({"offset": list(self.unit_offset)} if self.unit_offset else {})}
        return {}

    def state_conversions(self) -> Conversions | None:
        """The joint states' conversions into the model's units (None: the state as reported)."""
        if not self.joint_conversions:
            return None
        parsed = [parse_conversions(str(t), f"joint_conversions[{i}]") for i, t in enumerate(self.joint_conversions)]
        for i, c in enumerate(parsed):
            if len(c) != 1:
                raise ValueError(f"joint_conversions[{i}]: one conversion per joint, got {len(c)}")
        return Conversions(tuple(d for c in parsed for d in c.dims))

    def validate(self) -> "RuntimeConfig":
        """Raise ValueError naming the first bad field and why; returns self."""
        checks: list[tuple[bool, str]] = [
            (self.checkpoint != "" or self.model_preset in PRESETS, f"model_preset must be one of {sorted(PRESETS)}"),
            (self.norm_mode in NORM_MODE_CHOICES, f"norm_mode must be one of {list(NORM_MODE_CHOICES)}"),
            (not (self.norm_mode == "none" and self.norm_stats), "norm_mode 'none' contradicts a norm_stats file"),
            (self.dtype in DTYPE_CHOICES, f"dtype must be one of {list(DTYPE_CHOICES)}"),
            (self.device == "cpu" or self.device.startswith("cuda"), "device must be 'cpu' or 'cuda[:N]'"),
            (0 <= self.horizon <= 1000, "horizon must be in 0..1000 (0 = the checkpoint's chunk length)"),
            (0 <= self.denoise_steps <= 1000, "denoise_steps must be in 0..1000 (0 = the checkpoint's)"),
            (self.prompt_format in PROMPT_FORMAT_CHOICES, f"prompt_format must be one of {list(PROMPT_FORMAT_CHOICES)}"),
            (self.resize_mode in RESIZE_MODE_CHOICES, f"resize_mode must be one of {list(RESIZE_MODE_CHOICES)}"),
            (all(isinstance(b, bool) for b in self.delta_action_mask), "delta_action_mask must be a list of booleans"),
            (self.paligemma_variant in ("", *VARIANTS), f"paligemma_variant must be '' or one of {sorted(VARIANTS)}"),
            (self.action_expert_variant in ("", *VARIANTS), f"action_expert_variant must be '' or one of {sorted(VARIANTS)}"),
            (0 <= self.action_dim <= 4096, "action_dim must be in 0..4096 (0 = the checkpoint's)"),
            (self.engine_mode in MODES, f"engine_mode must be one of {list(MODES)}"),
            (self.tokens_per_frame >= 0, "tokens_per_frame must be >= 0 (0 = fill the slack before the next tick)"),
            (self.kv_budget_mb > 0, "kv_budget_mb must be positive"),
            (self.admission in ("wait", "refuse"), "admission must be 'wait' or 'refuse'"),
            (self.max_waiting >= 0, "max_waiting must be >= 0"),
            (self.num_threads >= 0, "num_threads must be >= 0 (0 = torch's default)"),
            (self.action_backend in ACTION_BACKENDS, f"action_backend must be one of {list(ACTION_BACKENDS)}"),
            (self.action_backend != "cuda_graph" or self.device.startswith("cuda"),
             "action_backend 'cuda_graph' needs device cuda[:N] ('auto' picks it there)"),
            (self.prefill_backend in PREFILL_BACKENDS, f"prefill_backend must be one of {list(PREFILL_BACKENDS)}"),
            (self.pack_decode_weights in PACK_CHOICES, f"pack_decode_weights must be one of {list(PACK_CHOICES)}"),
            (0 <= self.n_action_steps and (not self.horizon or self.n_action_steps <= self.horizon),
             "n_action_steps must be in 0..horizon (0 = the checkpoint's value, else the whole chunk)"),
            (self.replan in REPLAN, f"replan must be one of {list(REPLAN)}"),
            (self.time_alignment in TIME_ALIGNMENTS, f"time_alignment must be one of {list(TIME_ALIGNMENTS)}"),
            (0 <= self.rtc_beta < float("inf"), "rtc_beta must be finite and >= 0"),
            (0 <= self.rtc_prefix_attention_horizon and (not self.horizon or self.rtc_prefix_attention_horizon <= self.horizon),
             "rtc_prefix_attention_horizon must be in 0..horizon (0 = the whole overlap)"),
            (self.rtc_schedule in SCHEDULES, f"rtc_schedule must be one of {list(SCHEDULES)}"),
            (self.embodiment in ("auto", *ADAPTERS), f"embodiment must be one of {['auto', *ADAPTERS]}"),
            (self.embodiment == "scale_offset" or not (self.unit_scale or self.unit_offset),
             "unit_scale / unit_offset apply to embodiment scale_offset only"),
        ]
        for ok, reason in checks:
            if not ok:
                raise ValueError(reason)
        self.state_conversions()  # raises ConversionError (a ValueError) naming the entry
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"task names must be unique, got {names}")
        for t in self.tasks:
            if not t.name or not t.name.replace("_", "").isalnum():
                raise ValueError(f"task name {t.name!r} must be letters, digits and '_' (it becomes a topic name)")
            if not t.prompt:
                raise ValueError(f"task {t.name!r} needs a non-empty continuation prompt")
            if t.every_n_frames < 1 or t.max_tokens < 1:
                raise ValueError(f"task {t.name!r}: every_n_frames and max_tokens must be >= 1")
        for path_field in ("checkpoint", "tokenizer", "norm_stats"):
            value = getattr(self, path_field)
            if value and not Path(value).expanduser().exists():
                raise ValueError(f"{path_field}: {value} does not exist")
        return self

    @staticmethod
    def tasks_from_lists(
        names: list[str],
        prompts: list[str],
        every_n_frames: list[int],
        max_tokens: list[int],
        stops: list[str] | None = None,
    ) -> list[TaskConfig]:
        """The node's flat task parameters (ROS parameters cannot hold lists of mappings).

        ``stops`` holds one stop string per task ('' = none); empty or None = no stop strings at all.
        """
        stops = list(stops or [""] * len(names))
        if not (len(names) == len(prompts) == len(every_n_frames) == len(max_tokens) == len(stops)):
            raise ValueError(
                "task_names, task_prompts, task_every_n_frames, task_max_tokens (and task_stop when given) must "
                f"have the same length (got {len(names)}, {len(prompts)}, {len(every_n_frames)}, {len(max_tokens)}, "
                f"{len(stops)})"
            )
        return [
            TaskConfig(n, p, int(e), int(m), [stop] if stop else [])
            for n, p, e, m, stop in zip(names, prompts, every_n_frames, max_tokens, stops)
        ]

    @classmethod
    def from_dict(cls, data: dict[str, Any], ignore_unknown: bool = False) -> "RuntimeConfig":
        """Build from a mapping; ``tasks`` may be a list of mappings or the node's flat ``task_*`` lists."""
        data = dict(data)
        known = {f.name for f in dataclasses.fields(cls)}
        flat = ("task_names", "task_prompts", "task_every_n_frames", "task_max_tokens", "task_stop")
        if any(k in data for k in flat):
            data["tasks"] = cls.tasks_from_lists(*(list(data.pop(k, [])) for k in flat))
        elif "tasks" in data:
            data["tasks"] = [t if isinstance(t, TaskConfig) else TaskConfig(**t) for t in data["tasks"]]
        unknown = sorted(set(data) - known)
        if unknown and not ignore_unknown:
            raise ValueError(f"unknown runtime settings: {unknown}")
        return cls(**{k: v for k, v in data.items() if k in known})
