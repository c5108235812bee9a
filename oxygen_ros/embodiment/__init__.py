"""Robot-side transforms of each checkpoint's framework, between the robot's units and the model's.

An adapter changes the robot state before normalization (``state_in``) and the actions after
unnormalization and relative-action handling (``actions_out``), exactly where openpi's ``<robot>_policy.py``
input and output transforms and its robot clients sit. Conversions (``conversions.py``) then take each
output's values into its controller's units and each joint state into the adapter's, as the robot's own
driver does. No ROS here.
"""

from .adapters import ADAPTERS, Adapter, AdapterError, adapter_for_asset, make_adapter
from .conversions import CONVERTERS, PLACEHOLDER, ConversionError, Conversions, identities, parse_conversions

__all__ = ["ADAPTERS", "CONVERTERS", "PLACEHOLDER", "Adapter", "AdapterError", "ConversionError", "Conversions",
           "adapter_for_asset", "identities", "make_adapter", "parse_conversions"]  # fmt: skip
