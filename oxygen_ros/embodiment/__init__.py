"""Robot-side transforms of each checkpoint's framework, between the robot's units and the model's.

An adapter changes the robot state before normalization (``state_in``) and the actions after
unnormalization and relative-action handling (``actions_out``), exactly where openpi's ``<robot>_policy.py``
input and output transforms and its robot clients sit. No ROS here.
"""

from .adapters import ADAPTERS, Adapter, AdapterError, adapter_for_asset, make_adapter
from .units import lerobot_motor_units, quat_to_axis_angle

__all__ = ["ADAPTERS", "Adapter", "AdapterError", "adapter_for_asset", "lerobot_motor_units", "make_adapter",
           "quat_to_axis_angle"]  # fmt: skip
