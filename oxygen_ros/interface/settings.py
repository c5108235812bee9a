"""Validation of a full set of parameter values and its mapping to `NodeSettings` (the ROS side) and
`RuntimeConfig` (the model side). No rclpy: the node and the offline tools share it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from oxygen_ros.embodiment import PLACEHOLDER, parse_conversions
from oxygen_ros.runtime import RuntimeConfig
from oxygen_ros.runtime.outputs import OutputConfigError, OutputSpec, build_outputs, output_problems, step_problems
from oxygen_ros.runtime.cameras import slot_names_of, slot_positions
from oxygen_ros.runtime.paths import with_resolved_paths
from oxygen_ros.runtime.safety import OutputLimits, limit_table_problems, limits_of_outputs

from .joint_sources import JointSource, JointSourceError, joint_sources
from .param_spec import ConfigError
from .params import PARAMS, RUNTIME_FIELDS, SPECS, TASK_LISTS

__all__ = [
    "ConfigError",
    "NodeSettings",
    "cross_checks",
    "default_values",
    "model_fit_problems",
    "node_settings",
    "runtime_config",
    "settings_from_values",
    "validate_values",
]


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
    outputs: tuple[OutputSpec, ...] = ()  # the controller outputs (the legacy single trajectory included)
    explicit_outputs: bool = False  # given as output_* lists: every action dim must go to one of them
    robots: tuple[str, ...] = ()  # the robots served (each under its namespace); () = one robot, topics as given
    robot_control_rates_hz: tuple[float, ...] = ()  # one per robot; () = every robot at control_rate_hz
    joint_sources: tuple[JointSource, ...] = ()  # the joint-state topics and the joints each fills; () = none
    limits: Mapping[str, OutputLimits] = dataclasses.field(default_factory=dict)  # per output name
    hold_timeout_s: float = 0.0  # 0 = n_action_steps steps + two control periods
    resume_blend_s: float = 0.5
    stop_topic: str = "~/stop"
    episode_topic: str = ""  # a simulator's episode reports: each episode's noise seeded by its seed; "" = none

    @property
    def control_period_s(self) -> float:
        return 1.0 / self.control_rate_hz

    @property
    def step_period_s(self) -> float:
        """Time between two actions of a chunk."""
        return self.action_step_period_s or self.control_period_s

    @property
    def tick_period_s(self) -> float:
        """The control timer's period: the fastest robot's control period."""
        return 1.0 / max(self.robot_control_rates_hz, default=self.control_rate_hz)

    def for_robot(self, robot: str) -> NodeSettings:
        """The settings as one robot sees them: its own rate (robot_control_rates_hz) as control_rate_hz, so its
        control and step periods follow."""
        if not self.robot_control_rates_hz or robot not in self.robots:
            return self
        return replace(self, control_rate_hz=self.robot_control_rates_hz[self.robots.index(robot)])


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
    problems += placeholder_problems(values)
    if problems:
        return problems
    problems = cross_checks(values)
    if problems:
        return problems
    try:
        runtime_config(values).validate()
        _camera_slots(values)  # feature names the checkpoint does not have
    except ValueError as exc:  # CheckpointError is a ValueError too
        problems.append(str(exc))
    return problems


def placeholder_problems(values: Mapping[str, Any]) -> list[str]:
    """One line per parameter that still holds a FILL_IN placeholder (a shipped config's value to set)."""
    problems = []
    for name, value in values.items():
        entries = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(e, str) and PLACEHOLDER in e for e in entries):
            problems.append(f"{name}: a {PLACEHOLDER} placeholder is left in it; set it (the config's comment says what "
                            "goes there)")
    return problems


def cross_checks(v: Mapping[str, Any]) -> list[str]:
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
    try:
        joint_sources_of(v)
    except JointSourceError as exc:
        problems.append(str(exc))
    if v["joint_conversions"] and len(v["joint_conversions"]) != len(joints):
        problems.append(f"joint_conversions must be empty or have one entry per joint_names entry ({len(joints)}), "
                        f"got {len(v['joint_conversions'])}")
    if v["prompt_format"] == "pi05_state" and not joints:
        problems.append("prompt_format 'pi05_state' puts the joint state in the prompt: set joint_names")
    try:
        problems.extend(_conversion_mismatches(outputs_of(v)[0], joints, list(v["joint_conversions"])))
        problems.extend(step_problems(outputs_of(v)[0], joints))
    except OutputConfigError as exc:
        problems.extend(str(exc).splitlines())
    except ValueError:
        pass  # a joint conversion that does not parse: runtime_config(...).validate() reports it
    try:
        specs = outputs_of(v)[0]
        problems.extend(limit_table_problems(v, len(specs)))
        named = {j for spec in specs for j in spec.joints}
        unknown = [j for j in v.get("limit_joints") or [] if j not in named]
        if unknown:
            problems.append(f"limit_joints {unknown} are no output's joints (output_joints): their limits would guard nothing")
    except (OutputConfigError, ValueError):
        pass  # the outputs' own problems are reported above
    if v.get("robots"):
        problems.extend(_robots_problems(v))
    rates, robots = list(v.get("robot_control_rates_hz") or []), list(v.get("robots") or [])
    if rates and not robots:
        problems.append("robot_control_rates_hz needs robots (one robot runs at control_rate_hz)")
    elif rates and len(rates) != len(robots):
        problems.append(f"robot_control_rates_hz must be empty or have one rate per robots entry ({len(robots)}), "
                        f"got {len(rates)}")
    features = list(v.get("camera_features") or [])
    if features and len(features) != len(topics):
        problems.append(f"camera_features must be empty or name one feature per camera_topics entry ({len(topics)}), "
                        f"got {len(features)}")
    return problems


def _conversion_mismatches(outputs: Sequence[OutputSpec], joints: list[str], texts: list[str]) -> list[str]:
    """A joint commanded in position and read as state has one unit: its output and joint conversions must agree."""
    if not texts or len(texts) != len(joints):
        return []
    state = dict(zip(joints, parse_conversions(";".join(map(str, texts)), "joint_conversions").dims))
    problems = []
    for spec in outputs:
        if spec.conversions is None or spec.interface != "position" or spec.type == "twist":
            continue
        for joint, conv in zip(spec.joints, spec.conversions.dims):
            if joint in state and state[joint].relation != conv.relation:
                problems.append(f"output_conversions of {spec.name}: joint {joint} is converted as {conv.relation!r} but "
                                f"joint_conversions reads it as {state[joint].relation!r} (one joint, one unit)")
    return problems


def _robots_problems(v: Mapping[str, Any]) -> list[str]:
    """Several robots share one engine tick (oxygen or action_only) and resolve every topic under their namespace."""
    problems = []
    if v["engine_mode"] not in ("oxygen", "action_only"):
        problems.append(f"robots: several robots need engine_mode oxygen or action_only, not {v['engine_mode']!r}")
    named = [("camera_topics", t) for t in v["camera_topics"] if t]
    named += [(n, v[n]) for n in ("joint_state_topic", "instruction_topic", "trajectory_topic")]
    named += [("joint_state_topics", t) for t in v.get("joint_state_topics") or []]
    named += [("output_topics", t) for t in v.get("output_topics") or []]
    absolute = [f"{name} {topic!r}" for name, topic in named if topic.startswith("/")]
    if absolute:
        problems.append(f"robots: topics must be relative to follow each robot's namespace, got {', '.join(absolute)}")
    return problems


def _camera_slots(v: Mapping[str, Any]) -> tuple[tuple[str, ...], list[int]] | None:
    """(slot names, slot of each camera_topics entry) when cameras are given by feature name, else None."""
    features = list(v.get("camera_features") or [])
    if not features:
        return None
    names = slot_names_of(runtime_config(v))
    return names, slot_positions(names, features)


def joint_sources_of(v: Mapping[str, Any]) -> tuple[JointSource, ...]:
    """The joint-state topics (joint_state_topics, else joint_state_topic) and the joints each fills; () without
    joint_names."""
    if not v.get("joint_names"):
        return ()
    topics = list(v.get("joint_state_topics") or []) or [v["joint_state_topic"]]
    return joint_sources(topics, list(v.get("joint_state_prefixes") or []), list(v["joint_names"]))


def runtime_config(values: Mapping[str, Any]) -> RuntimeConfig:
    """The model-side configuration (not validated: call `.validate()` or `validate_values`). Relative model paths
    that do not exist from the working directory are looked up in the package's folders (`resolve_data_path`)."""
    values = with_resolved_paths(values)
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
    if settings.explicit_outputs:
        problems.extend(output_problems(settings.outputs, action_dim))
    return problems


def outputs_of(v: Mapping[str, Any]) -> tuple[tuple[OutputSpec, ...], bool]:
    """The outputs and whether they were given explicitly; without output_types, the single JointTrajectory
    of joint_names on trajectory_topic (when there are joint_names). publish_trajectory switches them all."""
    types = list(v.get("output_types") or [])
    if types:
        specs = build_outputs(
            list(v["output_names"]), types, list(v["output_topics"]), list(v["output_dims"]), list(v["output_joints"]),
            list(v["output_interfaces"]), list(v["output_frames"]), list(v["output_scales"]), list(v["output_binarize"]),
            list(v["output_conversions"]), groups=list(v.get("output_groups") or []),
            together=list(v.get("output_scale_together") or []),
        )  # fmt: skip
        return tuple(specs), True
    joints = tuple(v["joint_names"])
    if not joints:
        return (), False
    legacy = OutputSpec("trajectory", "joint_trajectory", v["trajectory_topic"], tuple(range(len(joints))), joints)
    return (legacy,), False


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
        outputs=outputs_of(v)[0],
        explicit_outputs=outputs_of(v)[1],
        robots=tuple(v["robots"]),
        robot_control_rates_hz=tuple(float(r) for r in v["robot_control_rates_hz"]),
        joint_sources=joint_sources_of(v),
        limits=limits_of_outputs(outputs_of(v)[0], v, tuple(v["joint_names"]), tuple(v["joint_limits_lower"]),
                                 tuple(v["joint_limits_upper"])),  # fmt: skip
        hold_timeout_s=float(v["hold_timeout_s"]),
        resume_blend_s=float(v["resume_blend_s"]),
        stop_topic=v["stop_topic"],
        episode_topic=v["episode_topic"],
    )
