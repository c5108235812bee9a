"""The parameter table on an rclpy node: declaration with descriptors, reading, and the on-set check.

The table itself (`oxygen_ros.interface.params`) and its validation (`oxygen_ros.interface.settings`)
need no rclpy; this module is the glue.

Declared types are kept: an integer given for a double (a YAML `5`, `ros2 param set ... 3`) is converted
to a double, anything else of the wrong type is refused. Every parameter has a value, an empty list
included (rclpy cannot infer the type of `[]`, so those are declared typed and then given their empty
value), so `ros2 param dump` and `ros2 param get` show all of them. An empty YAML list (`[]`) reaches the
node as "not set" and keeps the (empty) default.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

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

from oxygen_ros.interface.param_spec import ConfigError, ParamSpec
from oxygen_ros.interface.params import PARAMS, SPECS
from oxygen_ros.interface.settings import cross_checks

__all__ = ["check_changes", "declare_parameters", "descriptor", "read_values"]

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


def descriptor(spec: ParamSpec, read_only: bool | None = None) -> ParameterDescriptor:
    """The ROS descriptor of `spec`; `read_only` overrides its flag (a managed node enforces it itself)."""
    text = spec.description
    if spec.choices:
        text += f" One of: {', '.join(spec.choices)}."
    desc = ParameterDescriptor(
        name=spec.name,
        type=_ROS_TYPES[spec.kind],
        description=text,
        read_only=spec.read_only if read_only is None else read_only,
    )
    if spec.low is not None and spec.high is not None and spec.kind == "int":
        desc.integer_range = [IntegerRange(from_value=int(spec.low), to_value=int(spec.high), step=1)]
    elif spec.low is not None and spec.high is not None and spec.kind == "float":
        desc.floating_point_range = [FloatingPointRange(from_value=float(spec.low), to_value=float(spec.high), step=0.0)]
    if spec.choices:
        desc.additional_constraints = f"one of {list(spec.choices)}"
    return desc


# Read-only for the node's whole life, also on an unconfigured managed node: the robots name the node's ~/ask
# action servers, which are created with the node (adding or removing an action server while the executor spins
# can stall it).
LIFETIME_PARAMS = frozenset({"robots"})


def declare_parameters(node: Node, specs: Sequence[ParamSpec] = PARAMS, fixed_read_only: bool = True) -> dict[str, Any]:
    """Declare every parameter on `node` (overrides from --params-file apply) and return the values.

    `fixed_read_only=False` leaves the parameters that fix the model and the wiring writable for ROS (a
    managed node accepts them while unconfigured and refuses them itself otherwise, see `check_changes`), except
    LIFETIME_PARAMS.
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
        read_only = spec.read_only and (fixed_read_only or spec.name in LIFETIME_PARAMS)
        empty_list = spec.kind.endswith("[]") and not spec.default
        try:
            if empty_list:
                # rclpy infers BYTE_ARRAY from []: declare the typed parameter writable, give it its typed empty
                # value unless overridden, then apply the final (possibly read-only) descriptor.
                node.declare_parameter(spec.name, _ARRAY_TYPES[spec.kind], descriptor(spec, read_only=False))
                if node.get_parameter_or(spec.name).type_ == Parameter.Type.NOT_SET:
                    result = node.set_parameters([Parameter(spec.name, _ARRAY_TYPES[spec.kind], [])])[0]
                    if not result.successful:
                        raise ValueError(result.reason)
                node.set_descriptor(spec.name, descriptor(spec, read_only))
            else:
                node.declare_parameter(spec.name, spec.default, descriptor(spec, read_only))
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
    problems = cross_checks(merged)
    if problems:
        return SetParametersResult(successful=False, reason="; ".join(problems))
    return SetParametersResult(successful=True)
