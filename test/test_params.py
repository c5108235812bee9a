"""The node's parameters: declarations, validation with reasons, mapping to the runtime, and refusal of
bad values at start-up and while running (in-process node with a fake runtime: no model, no DDS peer)."""

from __future__ import annotations

import pytest
import rclpy
from rclpy.parameter import Parameter

from oxygen_ros.interface import params as P, settings as S
from oxygen_ros.ros.node import OxygenNode
from oxygen_ros.ros.node_params import descriptor
from oxygen_ros.runtime import RuntimeConfig

from ros_helpers import FakeRuntime

JOINTS = [f"j{i}" for i in range(7)]
GOOD = {"camera_topics": ["/cam0", "", "/cam2"], "joint_names": JOINTS}
FLEET = {"robots": ["a", "b"], "camera_topics": ["cam0"]}  # several robots need relative topics


@pytest.fixture(scope="module", autouse=True)
def ros_context():
    rclpy.init()
    yield
    rclpy.shutdown()


def make_node(**overrides):
    values = {**GOOD, **overrides}
    load = FakeRuntime.loader()
    node = OxygenNode(
        "params_test_node", runtime_loader=load,
        parameter_overrides=[Parameter(k, value=v) for k, v in values.items()],
    )
    return node, load.made[0]


# ---------------------------------------------------------------------------------- pure validation
def test_defaults_are_valid_once_joints_are_named():
    assert S.validate_values(GOOD) == []


def test_every_parameter_has_a_description_and_a_matching_default_type():
    for spec in P.PARAMS:
        assert spec.description, spec.name
        assert spec.validate(spec.default) is None, spec.name
        assert descriptor(spec).description


def test_every_runtime_field_is_a_parameter():
    runtime_fields = set(P.RUNTIME_FIELDS) | set(P.TASK_LISTS)
    assert runtime_fields <= set(P.SPECS)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"control_rate_hz": 0.0}, "control_rate_hz must be > 0"),
        ({"control_rate_hz": -5.0}, "control_rate_hz must be > 0"),
        ({"control_rate_hz": "fast"}, "control_rate_hz: expected float"),
        ({"max_observation_age_s": float("nan")}, "must be finite"),
        ({"horizon": -1}, "horizon must be >= 0"),
        ({"camera_features": ["base_0_rgb"]}, "camera_features must be empty or name one feature per camera_topics"),
        ({"camera_features": ["base_0_rgb", "top", "right_wrist_0_rgb"]}, "unknown image feature 'top'"),
        ({"engine_mode": "turbo"}, "engine_mode must be one of"),
        ({"dtype": "float16"}, "dtype must be one of"),
        ({"device": "tpu"}, "device must be 'cpu'"),
        ({"task_names": ["a", "b"], "task_prompts": ["x"]}, "must have the same length"),
        ({"task_names": ["bad name", "memory"]}, "must start with a letter"),
        ({"task_names": ["same", "same"]}, "must be unique"),
        ({"task_every_n_frames": [1, 0]}, "task_every_n_frames must be >= 1"),
        ({"camera_topics": ["", ""]}, "at least one camera"),
        ({"camera_topics": ["/bad topic"]}, "not a valid topic name"),
        ({"camera_optional": [True]}, "camera_optional must be empty or have one entry per camera_topics"),
        ({"joint_limits_lower": [0.0] * 7}, "must be given together"),
        ({"joint_limits_lower": [0.0] * 3, "joint_limits_upper": [1.0] * 3}, "one entry per joint name"),
        ({"joint_limits_lower": [1.0] * 7, "joint_limits_upper": [0.0] * 7}, "joint_limits_lower > joint_limits_upper"),
        ({"joint_names": ["a", "a"]}, "joint_names must be unique"),
        ({"joint_names": [], "prompt_format": "pi05_state"}, "'pi05_state' puts the joint state in the prompt"),
        ({"checkpoint": "/no/such/checkpoint"}, "checkpoint: /no/such/checkpoint does not exist"),
        ({"no_such_parameter": 1}, "unknown parameters ['no_such_parameter']"),
        ({"n_action_steps": -1}, "n_action_steps must be >= 0"),
        ({"horizon": 10, "n_action_steps": 11}, "n_action_steps must be in 0..horizon"),
        ({"replan": "sometimes"}, "replan must be one of"),
        ({"time_alignment": "late"}, "time_alignment must be one of"),
        ({"rtc": "yes"}, "rtc: expected bool"),
        ({"rtc_beta": -0.5}, "rtc_beta must be >= 0"),
        ({"rtc_beta": float("inf")}, "must be finite"),
        ({"horizon": 10, "rtc_prefix_attention_horizon": 12}, "rtc_prefix_attention_horizon must be in 0..horizon"),
        ({"rtc_schedule": "cosine"}, "rtc_schedule must be one of"),
        ({"action_backend": "jit"}, "action_backend must be one of"),
        ({"action_backend": "cuda_graph", "device": "cpu"}, "action_backend 'cuda_graph' needs device cuda"),
        ({"prefill_backend": "cuda_graph"}, "prefill_backend must be one of"),
        ({"robots": ["arm 1"]}, "must be one namespace token"),
        ({"robots": ["1arm"]}, "must be one namespace token"),
        ({"robots": ["a", "a"]}, "robots must be unique"),
        ({"robots": ["a", "b"], "engine_mode": "sequential"}, "several robots need engine_mode oxygen or action_only"),
        ({"robots": ["a", "b"], "camera_topics": ["/cam"]}, "camera_topics '/cam'"),
        ({"robots": ["a", "b"], "instruction_topic": "/instruction"}, "instruction_topic '/instruction'"),
        ({"robot_control_rates_hz": [5.0]}, "robot_control_rates_hz needs robots"),
        ({**FLEET, "robot_control_rates_hz": [5.0]}, "one rate per robots entry (2), got 1"),
        ({**FLEET, "robot_control_rates_hz": [5.0, 0.0]}, "robot_control_rates_hz must be > 0"),
        ({**FLEET, "robot_control_rates_hz": [5.0, -2.5]}, "robot_control_rates_hz must be > 0"),
        ({**FLEET, "robot_control_rates_hz": [float("inf"), 5.0]}, "robot_control_rates_hz must be finite"),
    ],
)
def test_bad_values_are_refused_with_a_reason(change, words):
    problems = S.validate_values({**GOOD, **change})
    assert problems and any(words in p for p in problems), problems
    with pytest.raises(S.ConfigError, match="invalid parameters"):
        S.settings_from_values({**GOOD, **change})


def test_each_robot_has_its_own_control_and_step_period():
    settings, _ = S.settings_from_values({**GOOD, **FLEET, "robot_control_rates_hz": [5, 2.5]})
    a, b = settings.for_robot("a"), settings.for_robot("b")
    assert (a.control_rate_hz, a.step_period_s, b.control_rate_hz, b.step_period_s) == (5.0, 0.2, 2.5, 0.4)
    assert settings.tick_period_s == 0.2  # the timer runs at the fastest robot's rate
    fixed, _ = S.settings_from_values({**GOOD, **FLEET, "robot_control_rates_hz": [5, 2.5],
                                       "action_step_period_s": 0.05})  # fmt: skip
    assert fixed.for_robot("a").step_period_s == fixed.for_robot("b").step_period_s == 0.05
    shared, _ = S.settings_from_values({**GOOD, **FLEET, "control_rate_hz": 4.0})
    assert shared.for_robot("b").step_period_s == shared.tick_period_s == shared.control_period_s == 0.25


def test_integers_are_accepted_for_doubles():
    assert S.validate_values({**GOOD, "control_rate_hz": 5, "joint_limits_lower": [-1] * 7, "joint_limits_upper": [1] * 7}) == []
    settings, _ = S.settings_from_values({**GOOD, "control_rate_hz": 5})
    assert settings.control_rate_hz == 5.0 and isinstance(settings.control_rate_hz, float)


def test_mapping_to_runtime_and_node_settings():
    settings, cfg = S.settings_from_values({
        **GOOD,
        "camera_topics": ["/a/image_raw", "", "/b/image_raw/compressed"],
        "camera_widths": [64, 0, 32], "camera_heights": [48, 0, 24],
        "task_names": ["language"], "task_prompts": [" Subtask:"], "task_every_n_frames": [3], "task_max_tokens": [7],
        "engine_mode": "shared", "kv_budget_mb": 32, "horizon": 5, "control_rate_hz": 4.0,
    })
    assert isinstance(cfg, RuntimeConfig)
    assert (cfg.engine_mode, cfg.kv_budget_mb, cfg.horizon) == ("shared", 32.0, 5)
    assert [(t.name, t.prompt, t.every_n_frames, t.max_tokens) for t in cfg.tasks] == [("language", " Subtask:", 3, 7)]
    assert settings.camera_compressed == (False, False, True)  # the '/compressed' suffix convention
    assert settings.camera_optional == (False, False, False)
    assert settings.camera_sizes == ((64, 48), (0, 0), (32, 24))
    assert settings.step_period_s == pytest.approx(0.25)
    _, cfg = S.settings_from_values({**GOOD, "n_action_steps": 4, "replan": "n_action_steps", "time_alignment": "drop",
                                     "rtc": True, "rtc_beta": 2, "rtc_prefix_attention_horizon": 6, "rtc_schedule": "linear"})
    assert (cfg.n_action_steps, cfg.replan, cfg.time_alignment) == (4, "n_action_steps", "drop")
    assert (cfg.rtc, cfg.rtc_beta, cfg.rtc_prefix_attention_horizon, cfg.rtc_schedule) == (True, 2, 6, "linear")
    settings, _ = S.settings_from_values({**GOOD, "camera_compressed": [True, False, False], "action_step_period_s": 0.05})
    assert settings.camera_compressed == (True, False, False)
    assert settings.step_period_s == 0.05


# ------------------------------------------------------------------------------------ on a node
def test_node_declares_every_parameter_with_its_descriptor():
    node, runtime = make_node()
    try:
        for spec in P.PARAMS:
            assert node.has_parameter(spec.name)
            desc = node.describe_parameter(spec.name)
            assert desc.description and desc.read_only == spec.read_only
        assert node.describe_parameter("control_rate_hz").floating_point_range[0].from_value == 0.0
        assert runtime.config.engine_mode == "oxygen"
        assert node.settings.joint_names == tuple(JOINTS)
    finally:
        node.destroy_node()


def test_bad_start_up_values_raise_config_error():
    with pytest.raises(S.ConfigError, match="control_rate_hz must be > 0"):
        make_node(control_rate_hz=-1.0)
    with pytest.raises(S.ConfigError, match="expected int"):
        make_node(horizon="ten")


def test_integer_override_for_a_double_is_accepted():
    node, _ = make_node(control_rate_hz=8, joint_limits_lower=[-1] * 7, joint_limits_upper=[1] * 7)
    try:
        assert node.settings.control_rate_hz == 8.0
        assert node._control_timer.timer_period_ns == 125_000_000
        assert node.get_parameter("control_rate_hz").type_ == Parameter.Type.DOUBLE  # converted, not retyped
        assert node.get_parameter("joint_limits_lower").type_ == Parameter.Type.DOUBLE_ARRAY
    finally:
        node.destroy_node()


def test_declared_types_are_kept_when_set():
    node, _ = make_node()
    try:
        done = node.set_parameters([Parameter("control_rate_hz", value=3)])[0]  # `ros2 param set ... 3`
        assert done.successful, done.reason
        param = node.get_parameter("control_rate_hz")
        assert param.type_ == Parameter.Type.DOUBLE and param.value == 3.0 and node.settings.control_rate_hz == 3.0
        for wrong in (True, "3", [3.0]):
            result = node.set_parameters([Parameter("control_rate_hz", value=wrong)])[0]
            assert not result.successful and "Wrong parameter type" in result.reason, wrong
        done = node.set_parameters_atomically([Parameter("joint_limits_lower", value=[-2] * 7),
                                               Parameter("joint_limits_upper", value=[2] * 7)])
        assert done.successful, done.reason
        assert node.get_parameter("joint_limits_lower").type_ == Parameter.Type.DOUBLE_ARRAY
        assert node.set_parameters([Parameter("max_instruction_chars", value=12.0)])[0].successful is False
    finally:
        node.destroy_node()


def test_every_parameter_has_a_typed_value_empty_lists_included():
    node, _ = make_node()
    try:
        for spec in P.PARAMS:
            param = node.get_parameter(spec.name)
            assert param.type_ != Parameter.Type.NOT_SET, spec.name
            assert param.type_.value == descriptor(spec).type, spec.name
        assert list(node.get_parameter("task_stop").value) == [] and list(node.get_parameter("camera_widths").value) == []
        # Still read-only once set to its empty value.
        assert not node.set_parameters([Parameter("camera_widths", value=[1, 2, 3])])[0].successful
    finally:
        node.destroy_node()


def test_parameters_that_do_not_fit_the_model_raise_config_error():
    with pytest.raises(S.ConfigError, match="4 entries but the model has 3 image slots"):
        make_node(camera_topics=["/a", "/b", "/c", "/d"])
    with pytest.raises(S.ConfigError, match="9 joints but the model's actions have 8"):
        make_node(joint_names=[f"j{i}" for i in range(9)])


def test_running_node_refuses_bad_values_and_applies_good_ones():
    node, _ = make_node()
    try:
        refused = node.set_parameters([Parameter("control_rate_hz", value=-2.0)])[0]
        assert not refused.successful and "control_rate_hz out of range" in refused.reason  # the descriptor's range
        refused = node.set_parameters([Parameter("control_rate_hz", value=0.0)])[0]
        assert not refused.successful and "control_rate_hz must be > 0" in refused.reason  # the on-set callback
        refused = node.set_parameters([Parameter("joint_limits_lower", value=[0.0, 1.0])])[0]
        assert not refused.successful and "must be given together" in refused.reason
        refused = node.set_parameters([Parameter("engine_mode", value="sequential")])[0]
        assert not refused.successful and "read-only" in refused.reason
        refused = node.set_parameters([Parameter("max_observation_age_s", value="old")])[0]
        assert not refused.successful and "Wrong parameter type" in refused.reason  # declared types are kept
        assert node.settings.control_rate_hz == 5.0

        done = node.set_parameters_atomically([
            Parameter("control_rate_hz", value=10.0),
            Parameter("joint_limits_lower", value=[-1.0] * 7),
            Parameter("joint_limits_upper", value=[1.0] * 7),
            Parameter("max_instruction_chars", value=50),
        ])
        assert done.successful, done.reason
        assert node.settings.control_rate_hz == 10.0
        assert node._control_timer.timer_period_ns == 100_000_000
        assert node._limits.lower == (-1.0,) * 7
        assert node.store.max_instruction_chars == 50
        assert node.diag.target_rate_hz == 10.0
    finally:
        node.destroy_node()
