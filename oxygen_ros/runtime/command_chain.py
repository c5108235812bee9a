"""A chunk in robot units → what each controller output commands over the whole horizon (no ROS types).

The output side of the node's chain after the runtime (which has applied the adapter and the relative
actions): per output its dims of the actions, binarized, converted into the controller's units
(``output_conversions``), a twist scaled, and a joint trajectory's positions clamped to the joint limits —
the same ``OutputSpec.values`` and ``limits_for`` the node's ``ControllerOutputs`` and the offline replay
call. Tools that judge commands (``oxygen-replay eval``) take them from here, so a step added to the chain
(a safety guard after the conversions) is added in this one function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .outputs import OutputSpec, limits_for


@dataclass(frozen=True)
class OutputCommands:
    spec: OutputSpec
    values: np.ndarray  # [horizon, len(spec.dims)] in the controller's units
    clamped: int  # positions changed by the joint limits


def chunk_commands(outputs: Sequence[OutputSpec], actions: np.ndarray, joint_names: Sequence[str],
                   lower: Sequence[float], upper: Sequence[float]) -> list[OutputCommands]:  # fmt: skip
    """Every output's commands for a [horizon, action_dim] chunk in robot units, in the outputs' order."""
    out = []
    for spec in outputs:
        values = spec.values(actions)
        clamped = 0
        if spec.type == "joint_trajectory":  # the node clamps its trajectories only (aligned_trajectory)
            values, clamped = limits_for(spec, joint_names, lower, upper).clamp(values)
        out.append(OutputCommands(spec, values, clamped))
    return out


def dim_names(outputs: Sequence[OutputSpec]) -> list[str]:
    """One name per commanded value, in ``chunk_commands``' order: the joint's name where the output names its
    joints, a twist's component, else ``<output>[i]``."""
    names = []
    for spec in outputs:
        if spec.type == "twist":
            names += [f"{spec.name}.{part}" for part in ("linear.x", "linear.y", "linear.z", "angular.x", "angular.y", "angular.z")]
        elif len(spec.joints) == len(spec.dims):
            names += list(spec.joints)
        else:
            names += [f"{spec.name}[{i}]" for i in range(len(spec.dims))]
    return names
