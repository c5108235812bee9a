"""The node's ROS parameters: one table of declarations, validation with reasons, and the mapping to
`RuntimeConfig` (model side) and `NodeSettings` (ROS side).

Every `RuntimeConfig` field is a parameter of the same name; the text tasks are four flat lists
(`task_names`, `task_prompts`, `task_every_n_frames`, `task_max_tokens`) because a ROS parameter
cannot hold a list of mappings. Parameters that fix the model or the wiring (topics) are read-only once
the node runs; the rest (rates, ages, output switches, limits, the default instruction) can be changed
with `ros2 param set`, and a bad value is refused with a reason.

Declared types are kept: an integer given for a double (a YAML `5`, `ros2 param set ... 3`) is converted
to a double, anything else of the wrong type is refused. Every parameter has a value, an empty list
included (rclpy cannot infer the type of `[]`, so those are declared typed and then given their empty
value), so `ros2 param dump` and `ros2 param get` show all of them. An empty YAML list (`[]`) reaches the
node as "not set" and keeps the (empty) default.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.validate_topic_name import validate_topic_name

from oxygen_ros.engine.modes import MODES
from oxygen_ros.engine.questions import ASK_TASK
from oxygen_ros.model.config import PRESETS
from oxygen_ros.model.key_maps import VARIANTS
from oxygen_ros.model.rtc import SCHEDULES
from oxygen_ros.runtime import RuntimeConfig
from oxygen_ros.runtime.alignment import REPLAN, TIME_ALIGNMENTS
from oxygen_ros.runtime.cameras import slot_names_of, slot_positions
from oxygen_ros.runtime.config import NORM_MODE_CHOICES, PROMPT_FORMAT_CHOICES, RESIZE_MODE_CHOICES

__all__ = [
    "ConfigError",
    "NodeSettings",
    "PARAMS",
    "ParamSpec",
    "check_changes",
    "declare_parameters",
    "default_values",
    "read_values",
    "settings_from_values",
    "validate_values",
]

DEFAULT_TRAJECTORY_TOPIC = "joint_trajectory_controller/joint_trajectory"  # relative: follows the namespace
_TASK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


class ConfigError(ValueError):
    """The node's parameters are inconsistent or out of range; the message lists every problem."""


# Parameter kinds: the Python type of the value ("float" accepts ints), "[]" suffix for arrays.
_ROS_TYPES = {
    "str": ParameterType.PARAMETER_STRING,
    "int": ParameterType.PARAMETER_INTEGER,
    "float": ParameterType.PARAMETER_DOUBLE,
    "bool": ParameterType.PARAMETER_BOOL,
    "str[]": ParameterType.PARAMETER_STRING_ARRAY,
    "int[]": ParameterType.PARAMETER_INTEGER_ARRAY,
    "float[]": ParameterType.PARAMETER_DOUBLE_ARRAY,
    "bool[]": ParameterType.PARAMETER_BOOL_ARRAY,
}
_ARRAY_TYPES = {
    "str[]": Parameter.Type.STRING_ARRAY,
    "int[]": Parameter.Type.INTEGER_ARRAY,
    "float[]": Parameter.Type.DOUBLE_ARRAY,
    "bool[]": Parameter.Type.BOOL_ARRAY,
}


@dataclass(frozen=True)
class ParamSpec:
    """One declared parameter. `low`/`high` bound a number (or each element of a number list)."""

    name: str
    kind: str
    default: Any
    description: str
    read_only: bool = True
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself is not allowed (e.g. a rate must be > 0)
    check: Callable[[Any], str | None] | None = None  # extra per-value check returning a reason

    def descriptor(self, read_only: bool | None = None) -> ParameterDescriptor:
        """The ROS descriptor; `read_only` overrides the spec's flag (a managed node enforces it itself)."""
        text = self.description
        if self.choices:
            text += f" One of: {', '.join(self.choices)}."
        desc = ParameterDescriptor(
            name=self.name,
            type=_ROS_TYPES[self.kind],
            description=text,
            read_only=self.read_only if read_only is None else read_only,
        )
        if self.low is not None and self.high is not None and self.kind == "int":
            desc.integer_range = [IntegerRange(from_value=int(self.low), to_value=int(self.high), step=1)]
        elif self.low is not None and self.high is not None and self.kind == "float":
            desc.floating_point_range = [FloatingPointRange(from_value=float(self.low), to_value=float(self.high), step=0.0)]
        if self.choices:
            desc.additional_constraints = f"one of {list(self.choices)}"
        return desc

    def validate(self, value: Any) -> str | None:
        """None if `value` is acceptable for this parameter, else the reason it is not."""
        base, is_list = self.kind.removesuffix("[]"), self.kind.endswith("[]")
        items = value if is_list else [value]
        if is_list and not isinstance(value, (list, tuple)):
            return f"{self.name} must be a list of {base}, got {type(value).__name__}"
        for item in items:
            reason = _check_type(base, item)
            if reason:
                return f"{self.name}: {reason}"
            if self.choices and item not in self.choices:
                return f"{self.name} must be one of {list(self.choices)}, got {item!r}"
            if base in ("int", "float"):
                reason = self._check_range(item)
                if reason:
                    return f"{self.name} {reason}"
        if self.check is not None:
            return self.check(value)
        return None

    def _check_range(self, x: float) -> str | None:
        if isinstance(x, float) and not math.isfinite(x):
            return f"must be finite, got {x}"
        if self.low is not None and (x < self.low or (self.low_open and x == self.low)):
            return f"must be {'>' if self.low_open else '>='} {self.low}, got {x}"
        if self.high is not None and x > self.high:
            return f"must be <= {self.high}, got {x}"
        return None


def _check_type(base: str, item: Any) -> str | None:
    ok = {
        "str": isinstance(item, str),
        "bool": isinstance(item, bool),
        "int": isinstance(item, int) and not isinstance(item, bool),
        "float": isinstance(item, (int, float)) and not isinstance(item, bool),
    }[base]
    return None if ok else f"expected {base}, got {item!r} ({type(item).__name__})"


def _check_device(value: str) -> str | None:
    return None if _DEVICE.match(value) else f"device must be 'cpu', 'cuda' or 'cuda:N', got {value!r}"


def _check_topic(name: str, allow_empty: bool = False) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        for topic in value if isinstance(value, (list, tuple)) else [value]:
            if allow_empty and topic == "":
                continue
            try:
                validate_topic_name(topic)
            except Exception as exc:  # rclpy raises InvalidTopicNameException with the position
                return f"{name}: {topic!r} is not a valid topic name ({exc})"
        return None

    return check


def _check_task_names(value: Sequence[str]) -> str | None:
    bad = [n for n in value if not _TASK_NAME.match(n)]
    if bad:
        return f"task_names {bad} must start with a letter and hold only letters, digits and '_' (they become topic names)"
    if len(set(value)) != len(value):
        return f"task_names must be unique, got {list(value)}"
    if ASK_TASK in value:
        return f"task_names: {ASK_TASK!r} is reserved for the ~/ask action's answers"
    return None


def _runtime_default(name: str) -> Any:
    return getattr(RuntimeConfig(), name)


def _task_default(field: str) -> list[Any]:
    return [getattr(t, field) for t in RuntimeConfig().tasks]


PARAMS: tuple[ParamSpec, ...] = (
    # ----------------------------------------------------------------- model (RuntimeConfig fields)
    ParamSpec("model_preset", "str", _runtime_default("model_preset"),
              "Built-in model shape used when 'checkpoint' is empty (random weights: for demos and tests).",
              choices=tuple(sorted(PRESETS))),
    ParamSpec("checkpoint", "str", "", "Checkpoint folder (model.safetensors + config.json); '' = use model_preset."),
    ParamSpec("tokenizer", "str", "",
              "PaliGemma tokenizer: SentencePiece .model file or Hugging Face folder (tokenizer.json); '' = the "
              "built-in demo tokenizer (random-weight presets only)."),
    ParamSpec("norm_stats", "str", "",
              "norm_stats.json (openpi format); '' = the checkpoint's own statistics (openpi assets/, LeRobot "
              "processor files). A checkpoint without any refuses to start unless norm_mode is none."),
    ParamSpec("norm_mode", "str", _runtime_default("norm_mode"),
              "How states/actions are normalized: auto = as the checkpoint's framework (LeRobot: its norm map; openpi: "
              "quantile; a preset: none), quantile, mean_std, or none (the model's normalized values go out as they are).",
              choices=NORM_MODE_CHOICES),
    ParamSpec("device", "str", _runtime_default("device"), "Torch device: cpu, cuda or cuda:N.", check=_check_device),
    ParamSpec("dtype", "str", _runtime_default("dtype"), "Model weights dtype.", choices=("float32", "bfloat16")),
    ParamSpec("horizon", "int", _runtime_default("horizon"),
              "Action chunk length H: 0 = the checkpoint's own (openpi action_horizon, LeRobot chunk_size); another "
              "value than the checkpoint's is refused. Sets H of a preset.", low=0, high=1000),
    ParamSpec("denoise_steps", "int", _runtime_default("denoise_steps"),
              "Flow-matching Euler steps per chunk; 0 = the checkpoint's (LeRobot num_inference_steps, else 10).",
              low=0, high=1000),
    ParamSpec("prompt_format", "str", _runtime_default("prompt_format"),
              "Prompt layout; auto = what the checkpoint records (LeRobot: pi05_state), else pi05_state with a "
              "warning; 'pi05_state' puts the digitized joint state in the prompt (needs joint_names).",
              choices=PROMPT_FORMAT_CHOICES),
    ParamSpec("resize_mode", "str", _runtime_default("resize_mode"),
              "Camera image resize: auto = as the checkpoint's framework; pil = openpi (PIL bilinear on uint8); "
              "bilinear = LeRobot (torch bilinear on float, no antialiasing).", choices=RESIZE_MODE_CHOICES),
    ParamSpec("delta_action_mask", "bool[]", [],
              "Per action dimension: true = trained relative to the state (the state is added back after "
              "unnormalizing; openpi ALOHA: 6 x true, false, 6 x true, false). Empty = the checkpoint's (LeRobot "
              "use_relative_actions), else absolute."),
    ParamSpec("paligemma_variant", "str", "",
              "Backbone shape of an openpi training checkpoint without config.json ('' = from config.json).",
              choices=("", *sorted(VARIANTS))),
    ParamSpec("action_expert_variant", "str", "",
              "Action expert shape of an openpi training checkpoint without config.json ('' = from config.json).",
              choices=("", *sorted(VARIANTS))),
    ParamSpec("action_dim", "int", 0,
              "Model action width of an openpi training checkpoint without config.json (0 = from config.json).",
              low=0, high=4096),
    ParamSpec("task_names", "str[]", _task_default("name"),
              "Text tasks decoded from every frame's shared prefix; each publishes on ~/text/<name>.",
              check=_check_task_names),
    ParamSpec("task_prompts", "str[]", _task_default("prompt"), "Continuation prompt of each task (same order)."),
    ParamSpec("task_every_n_frames", "int[]", _task_default("every_n_frames"),
              "Each task starts a new request every N control ticks.", low=1, high=1_000_000),
    ParamSpec("task_stop", "str[]", [], "Optional stop string of each task ('' = none); empty = no stop strings."),
    ParamSpec("task_max_tokens", "int[]", _task_default("max_tokens"), "Token limit of each task's requests.",
              low=1, high=100_000),
    ParamSpec("engine_mode", "str", _runtime_default("engine_mode"),
              "Scheduling: 'oxygen' (shared prefill + cross-frame batched text) or a comparison baseline.",
              choices=tuple(MODES)),
    ParamSpec("tokens_per_frame", "int", _runtime_default("tokens_per_frame"),
              "oxygen mode: 0 = decode as many tokens as fit before the next tick; k > 0 = k steps per tick.",
              low=0, high=100_000),
    ParamSpec("kv_budget_mb", "float", float(_runtime_default("kv_budget_mb")), "KV cache memory budget in MiB.",
              low=0.0, high=1e7, low_open=True),
    ParamSpec("admission", "str", _runtime_default("admission"),
              "When the KV budget is full: 'wait' queues new text requests, 'refuse' drops them.",
              choices=("wait", "refuse")),
    ParamSpec("max_waiting", "int", _runtime_default("max_waiting"), "Most text requests queued for KV memory.",
              low=0, high=100_000),
    ParamSpec("seed", "int", _runtime_default("seed"), "Seed of the action noise (and of preset weights).",
              low=0, high=2**31 - 1),
    ParamSpec("num_threads", "int", _runtime_default("num_threads"),
              "Torch CPU threads for the model (0 = torch's default, one per core).", low=0, high=1024),
    ParamSpec("action_backend", "str", _runtime_default("action_backend"),
              "'compiled': the action chunk through torch.compile, compiled at start-up (eager if that fails); "
              "'eager': plain torch.", choices=("eager", "compiled")),
    ParamSpec("overlap_decode", "bool", _runtime_default("overlap_decode"),
              "oxygen mode: run one batched decode step on a second thread while the action chunk runs."),
    # ------------------------------------------------------- chunk execution (runtime/alignment.py, chunking.py)
    ParamSpec("n_action_steps", "int", _runtime_default("n_action_steps"),
              "Execution horizon: actions of a chunk run after it arrives before the next one replaces it "
              "(0 = the checkpoint's n_action_steps, else the whole chunk); at most horizon.", low=0, high=1000),
    ParamSpec("replan", "str", _runtime_default("replan"),
              "When a new chunk is computed: every control tick, or once n_action_steps steps ran since the last.",
              choices=REPLAN),
    ParamSpec("time_alignment", "str", _runtime_default("time_alignment"),
              "'stamp': trajectories stamped with the observation time (the controller skips past points); "
              "'drop': the first ceil(latency / step) actions dropped, the rest start on arrival; 'none': every "
              "action from arrival (replays the past).", choices=TIME_ALIGNMENTS),
    ParamSpec("rtc", "bool", _runtime_default("rtc"),
              "Real-time chunking: guide each chunk's overlap with the still-executing previous chunk."),
    ParamSpec("rtc_beta", "float", _runtime_default("rtc_beta"),
              "Real-time chunking: maximum guidance weight (0 = plain sampling).", low=0.0, high=1e6),
    ParamSpec("rtc_prefix_attention_horizon", "int", _runtime_default("rtc_prefix_attention_horizon"),
              "Real-time chunking: rows of the new chunk guided at all (0 = the whole overlap); at most horizon.",
              low=0, high=1000),
    ParamSpec("rtc_schedule", "str", _runtime_default("rtc_schedule"),
              "Real-time chunking: prefix weights from the delay to the horizon.", choices=SCHEDULES),
    # ----------------------------------------------------------------------------- inputs (topics)
    ParamSpec("camera_topics", "str[]", ["camera/image_raw"],
              "One topic per image slot, in slot order (pi0.5: base, left wrist, right wrist); '' = no camera "
              "(masked slot). Slots past the end of the list are masked.",
              check=_check_topic("camera_topics", allow_empty=True)),
    ParamSpec("camera_features", "str[]", [],
              "Per camera_topics entry: the checkpoint image feature it feeds (LeRobot input_features name, e.g. "
              "observation.images.top or top; openpi base_0_rgb, left_wrist_0_rgb, right_wrist_0_rgb). Empty = "
              "camera_topics are in slot order. Slots no topic names are masked."),
    ParamSpec("camera_compressed", "bool[]", [],
              "Per slot: true = sensor_msgs/CompressedImage. Empty = a topic ending in '/compressed' is compressed."),
    ParamSpec("camera_optional", "bool[]", [],
              "Per slot: true = a missing/stale/bad image masks the slot; false (default) = no chunk without it."),
    ParamSpec("camera_widths", "int[]", [], "Per slot expected image width in pixels (0 = any); empty = any.",
              low=0, high=100_000),
    ParamSpec("camera_heights", "int[]", [], "Per slot expected image height in pixels (0 = any); empty = any.",
              low=0, high=100_000),
    ParamSpec("joint_state_topic", "str", "joint_states", "sensor_msgs/JointState topic.",
              check=_check_topic("joint_state_topic")),
    ParamSpec("joint_names", "str[]", [],
              "Joints read from joint_states (the state, in this order) and commanded by the trajectory (the first "
              "len(joint_names) action dimensions). Empty = no state and no trajectory."),
    ParamSpec("instruction_topic", "str", "~/instruction",
              "std_msgs/String instruction topic (reliable, transient local: publish it latched).",
              check=_check_topic("instruction_topic")),
    ParamSpec("default_instruction", "str", "", "Instruction used until one arrives on instruction_topic.",
              read_only=False),
    ParamSpec("max_instruction_chars", "int", 2000, "Longer instructions are refused.", read_only=False,
              low=1, high=1_000_000),
    # ------------------------------------------------------------------------------------- timing
    ParamSpec("control_rate_hz", "float", 5.0, "Control ticks (action chunks) per second.", read_only=False,
              low=0.0, high=1000.0, low_open=True),
    ParamSpec("action_step_period_s", "float", 0.0,
              "Time between consecutive actions of a chunk; 0 = one control period.", read_only=False,
              low=0.0, high=60.0),
    ParamSpec("max_observation_age_s", "float", 0.5,
              "Inputs older than this (node clock minus header stamp) are stale: no chunk from them.",
              read_only=False, low=0.0, high=3600.0, low_open=True),
    # ------------------------------------------------------------------------------------ outputs
    ParamSpec("publish_trajectory", "bool", True,
              "Also publish trajectory_msgs/JointTrajectory (needs joint_names); false = ActionChunk only.",
              read_only=False),
    ParamSpec("trajectory_topic", "str", DEFAULT_TRAJECTORY_TOPIC, "JointTrajectory topic of the controller.",
              check=_check_topic("trajectory_topic")),
    ParamSpec("publish_text", "bool", True, "Publish the text streams (~/text/<task> and ~/text/<task>/final).",
              read_only=False),
    ParamSpec("joint_limits_lower", "float[]", [],
              "Lower position limit per joint_names entry (trajectory points are clamped); empty = no clamping.",
              read_only=False),
    ParamSpec("joint_limits_upper", "float[]", [], "Upper position limit per joint_names entry; empty = no clamping.",
              read_only=False),
    ParamSpec("diagnostics_period_s", "float", 1.0, "Period of the /diagnostics report.", low=0.01, high=3600.0),
    # --------------------------------------------------------------------------- ~/ask (Ask action)
    ParamSpec("ask_max_tokens", "int", 48, "Longest answer of the ~/ask action (a goal's max_tokens 0 = this).",
              low=1, high=100_000),
    ParamSpec("ask_max_goals", "int", 4, "Most ~/ask goals open at once (more are refused); 0 = refuse every question.",
              low=0, high=32),
)

SPECS: dict[str, ParamSpec] = {p.name: p for p in PARAMS}
RUNTIME_FIELDS = tuple(f.name for f in dataclasses.fields(RuntimeConfig) if f.name != "tasks")
TASK_LISTS = ("task_names", "task_prompts", "task_every_n_frames", "task_max_tokens")


@dataclass(frozen=True)
class NodeSettings:
    """The ROS-side settings, per image slot lists already expanded to the configured slots."""

    camera_topics: tuple[str, ...]
    camera_compressed: tuple[bool, ...]
    camera_optional: tuple[bool, ...]
    camera_sizes: tuple[tuple[int, int], ...]  # (width, height), 0 = any
    joint_state_topic: str
    joint_names: tuple[str, ...]
    instruction_topic: str
    default_instruction: str
    max_instruction_chars: int
    control_rate_hz: float
    action_step_period_s: float
    max_observation_age_s: float
    publish_trajectory: bool
    trajectory_topic: str
    publish_text: bool
    joint_limits_lower: tuple[float, ...]
    joint_limits_upper: tuple[float, ...]
    diagnostics_period_s: float
    ask_max_tokens: int = 48
    ask_max_goals: int = 4

    @property
    def control_period_s(self) -> float:
        return 1.0 / self.control_rate_hz

    @property
    def step_period_s(self) -> float:
        """Time between two actions of a chunk."""
        return self.action_step_period_s or self.control_period_s


# ------------------------------------------------------------------------------- node plumbing
def declare_parameters(node: Node, specs: Sequence[ParamSpec] = PARAMS, fixed_read_only: bool = True) -> dict[str, Any]:
    """Declare every parameter on `node` (overrides from --params-file apply) and return the values.

    `fixed_read_only=False` leaves the parameters that fix the model and the wiring writable for ROS (a
    managed node accepts them while unconfigured and refuses them itself otherwise, see `check_changes`).
    Also registers the pre-set callback that turns integers given for doubles into doubles.
    Raises ConfigError when ROS itself refuses an override (e.g. a string given to an int parameter).
    """
    overrides = getattr(node, "_parameter_overrides", None)
    if overrides is None:
        overrides = {}
    _doubles_from_integers(overrides)  # the pre-set callback does not run for declarations
    node.add_pre_set_parameters_callback(lambda params: [_as_declared_type(p) for p in params])
    problems = []
    for spec in specs:
        read_only = spec.read_only and fixed_read_only
        empty_list = spec.kind.endswith("[]") and not spec.default
        try:
            if empty_list:
                # rclpy infers BYTE_ARRAY from []: declare the typed parameter writable, give it its typed empty
                # value unless overridden, then apply the final (possibly read-only) descriptor.
                node.declare_parameter(spec.name, _ARRAY_TYPES[spec.kind], spec.descriptor(read_only=False))
                if node.get_parameter_or(spec.name).type_ == Parameter.Type.NOT_SET:
                    result = node.set_parameters([Parameter(spec.name, _ARRAY_TYPES[spec.kind], [])])[0]
                    if not result.successful:
                        raise ValueError(result.reason)
                node.set_descriptor(spec.name, spec.descriptor(read_only))
            else:
                node.declare_parameter(spec.name, spec.default, spec.descriptor(read_only))
        except Exception as exc:  # rclpy: InvalidParameterTypeException / InvalidParameterValueException
            # Prefer this module's reason for the offending override over rclpy's longer message.
            override = overrides.get(spec.name)
            reason = spec.validate(override.value) if override is not None else None
            problems.append(reason or f"{spec.name}: {exc}")
    if problems:
        raise ConfigError("bad parameter: " + "; ".join(problems))
    return read_values(node, specs)


def _as_declared_type(param: Parameter) -> Parameter:
    """An integer (or integer list) given for a double (list) parameter, as a double; anything else unchanged."""
    spec = SPECS.get(param.name)
    if spec is None or spec.kind not in ("float", "float[]"):
        return param
    if spec.kind == "float" and param.type_ == Parameter.Type.INTEGER:
        return Parameter(param.name, Parameter.Type.DOUBLE, float(param.value))
    if spec.kind == "float[]" and param.type_ == Parameter.Type.INTEGER_ARRAY:
        return Parameter(param.name, Parameter.Type.DOUBLE_ARRAY, [float(x) for x in param.value])
    return param


def _doubles_from_integers(overrides: dict[str, Parameter]) -> None:
    for name, param in list(overrides.items()):
        overrides[name] = _as_declared_type(param)


def read_values(node: Node, specs: Sequence[ParamSpec] = PARAMS) -> dict[str, Any]:
    """Current values of the declared parameters (an unset list reads as [])."""
    return {spec.name: _get(node, spec) for spec in specs}


def _get(node: Node, spec: ParamSpec) -> Any:
    try:
        value = node.get_parameter(spec.name).value
    except ParameterUninitializedException:
        value = None
    if value is None and spec.kind.endswith("[]"):
        return []
    if spec.kind.endswith("[]") and value is not None and not isinstance(value, str):
        return list(value)  # rclpy returns array.array for number lists
    return value


def check_changes(current: Mapping[str, Any], changes: Sequence[Parameter], fixed_locked: bool = False) -> SetParametersResult:
    """The on-set-parameters check: each new value alone, then the whole set for consistency.

    `fixed_locked`: refuse the parameters that fix the model and the wiring (a configured managed node)."""
    merged = dict(current)
    for param in changes:
        spec = SPECS.get(param.name)
        if spec is None:
            continue  # parameters this module does not own (use_sim_time, qos overrides, ...)
        if fixed_locked and spec.read_only:
            return SetParametersResult(successful=False, reason=(
                f"{param.name} is fixed while the node is configured: clean it up (lifecycle) to change it"))
        value = param.value
        if value is None and spec.kind.endswith("[]"):
            value = []
        elif spec.kind.endswith("[]") and not isinstance(value, (list, tuple, str)):
            value = list(value)
        reason = spec.validate(value)
        if reason:
            return SetParametersResult(successful=False, reason=reason)
        merged[param.name] = value
    problems = _cross_checks(merged)
    if problems:
        return SetParametersResult(successful=False, reason="; ".join(problems))
    return SetParametersResult(successful=True)


# ----------------------------------------------------------------------------- validation/mapping
def default_values() -> dict[str, Any]:
    """Every parameter at its default."""
    return {spec.name: spec.default for spec in PARAMS}


def validate_values(values: Mapping[str, Any]) -> list[str]:
    """Every problem with a set of values (missing ones take their defaults); empty list = valid."""
    unknown = sorted(set(values) - set(SPECS))
    if unknown:
        return [f"unknown parameters {unknown}"]
    values = {**default_values(), **values}
    problems = [r for spec in PARAMS if (r := spec.validate(values[spec.name]))]
    if problems:
        return problems
    problems = _cross_checks(values)
    if problems:
        return problems
    try:
        runtime_config(values).validate()
        _camera_slots(values)  # feature names the checkpoint does not have
    except ValueError as exc:  # CheckpointError is a ValueError too
        problems.append(str(exc))
    return problems


def _cross_checks(v: Mapping[str, Any]) -> list[str]:
    problems = []
    lengths = [len(v[name]) for name in TASK_LISTS]
    if len(set(lengths)) != 1:
        problems.append(f"{', '.join(TASK_LISTS)} must have the same length, got {lengths}")
    if v.get("task_stop") and len(v["task_stop"]) != lengths[0]:
        problems.append(f"task_stop must be empty or have one entry per task ({lengths[0]}), got {len(v['task_stop'])}")
    topics = list(v["camera_topics"])
    if not any(topics):
        problems.append("camera_topics must name at least one camera ('' entries are masked slots)")
    for name in ("camera_compressed", "camera_optional", "camera_widths", "camera_heights"):
        if v[name] and len(v[name]) != len(topics):
            problems.append(f"{name} must be empty or have one entry per camera_topics entry ({len(topics)}), "
                            f"got {len(v[name])}")
    joints = list(v["joint_names"])
    if len(set(joints)) != len(joints) or any(not j for j in joints):
        problems.append(f"joint_names must be unique and non-empty, got {joints}")
    lower, upper = list(v["joint_limits_lower"]), list(v["joint_limits_upper"])
    if bool(lower) != bool(upper):
        problems.append("joint_limits_lower and joint_limits_upper must be given together")
    elif lower and not (len(lower) == len(upper) == len(joints)):
        problems.append(f"joint_limits_lower/upper need one entry per joint name ({len(joints)}), "
                        f"got {len(lower)} and {len(upper)}")
    elif lower:
        crossed = [j for j, lo, hi in zip(joints, lower, upper) if lo > hi]
        if crossed:
            problems.append(f"joint_limits_lower > joint_limits_upper for joints {crossed}")
    if v["prompt_format"] == "pi05_state" and not joints:
        problems.append("prompt_format 'pi05_state' puts the joint state in the prompt: set joint_names")
    features = list(v.get("camera_features") or [])
    if features and len(features) != len(topics):
        problems.append(f"camera_features must be empty or name one feature per camera_topics entry ({len(topics)}), "
                        f"got {len(features)}")
    return problems


def _camera_slots(v: Mapping[str, Any]) -> tuple[tuple[str, ...], list[int]] | None:
    """(slot names, slot of each camera_topics entry) when cameras are given by feature name, else None."""
    features = list(v.get("camera_features") or [])
    if not features:
        return None
    names = slot_names_of(runtime_config(v))
    return names, slot_positions(names, features)


def runtime_config(values: Mapping[str, Any]) -> RuntimeConfig:
    """The model-side configuration (not validated: call `.validate()` or `validate_values`)."""
    fields = {name: values[name] for name in RUNTIME_FIELDS if name in values}
    if "kv_budget_mb" in fields:
        fields["kv_budget_mb"] = float(fields["kv_budget_mb"])
    tasks = RuntimeConfig.tasks_from_lists(*(list(values[name]) for name in TASK_LISTS), list(values.get("task_stop") or []))
    return RuntimeConfig(tasks=tasks, **fields)


def settings_from_values(values: Mapping[str, Any]) -> tuple[NodeSettings, RuntimeConfig]:
    """Validate a full set of values and split it into the node's and the runtime's settings.

    Raises ConfigError listing every problem.
    """
    problems = validate_values(values)
    if problems:
        raise ConfigError("invalid parameters: " + "; ".join(problems))
    values = {**default_values(), **values}
    return node_settings(values), runtime_config(values)


def model_fit_problems(
    settings: NodeSettings, num_image_slots: int, action_dim: int, state_dim: int | None, needs_state: bool = False
) -> list[str]:
    """What in the ROS-side settings does not fit the loaded model (empty when all fits).

    ``needs_state``: the resolved prompt format or delta actions read the joint state.
    """
    problems = []
    if len(settings.camera_topics) > num_image_slots:
        problems.append(f"camera_topics has {len(settings.camera_topics)} entries but the model has {num_image_slots} image slots")
    joints = len(settings.joint_names)
    if joints > action_dim:
        problems.append(f"joint_names has {joints} joints but the model's actions have {action_dim} dimensions")
    if joints and state_dim is not None and joints > state_dim:  # narrower states use the statistics' leading entries
        problems.append(f"joint_names has {joints} joints but the norm stats describe a state of only {state_dim}")
    if needs_state and not joints:
        problems.append("the checkpoint's prompt format (pi05_state) or its delta actions need the joint state: set joint_names")
    return problems


def node_settings(v: Mapping[str, Any]) -> NodeSettings:
    """The ROS-side settings of already validated values (cameras given by feature name put in slot order)."""
    topics = tuple(v["camera_topics"])
    n = len(topics)
    compressed = tuple(v["camera_compressed"]) or tuple(t.endswith("/compressed") for t in topics)
    optional = tuple(v["camera_optional"]) or (False,) * n
    widths = tuple(v["camera_widths"]) or (0,) * n
    heights = tuple(v["camera_heights"]) or (0,) * n
    slots = _camera_slots(v)
    if slots is not None:
        names, positions = slots
        order = {slot: i for i, slot in enumerate(positions)}  # slot -> camera_topics index

        def arrange(values: tuple[Any, ...], empty: Any) -> tuple[Any, ...]:
            return tuple(values[order[s]] if s in order else empty for s in range(len(names)))

        topics, compressed, optional = arrange(topics, ""), arrange(compressed, False), arrange(optional, True)
        widths, heights = arrange(widths, 0), arrange(heights, 0)
    return NodeSettings(
        camera_topics=topics,
        camera_compressed=tuple(bool(c) for c in compressed),
        camera_optional=tuple(bool(o) for o in optional),
        camera_sizes=tuple((int(w), int(h)) for w, h in zip(widths, heights)),
        joint_state_topic=v["joint_state_topic"],
        joint_names=tuple(v["joint_names"]),
        instruction_topic=v["instruction_topic"],
        default_instruction=v["default_instruction"],
        max_instruction_chars=int(v["max_instruction_chars"]),
        control_rate_hz=float(v["control_rate_hz"]),
        action_step_period_s=float(v["action_step_period_s"]),
        max_observation_age_s=float(v["max_observation_age_s"]),
        publish_trajectory=bool(v["publish_trajectory"]),
        trajectory_topic=v["trajectory_topic"],
        publish_text=bool(v["publish_text"]),
        joint_limits_lower=tuple(float(x) for x in v["joint_limits_lower"]),
        joint_limits_upper=tuple(float(x) for x in v["joint_limits_upper"]),
        diagnostics_period_s=float(v["diagnostics_period_s"]),
        ask_max_tokens=int(v["ask_max_tokens"]),
        ask_max_goals=int(v["ask_max_goals"]),
    )
