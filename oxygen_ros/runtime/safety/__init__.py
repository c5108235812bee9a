"""The command guard: limits in the robot's units, re-timing and step scaling, the hold state (no ROS here)."""

from .guard import DEFAULT_BLEND_S, OutputGuard, SafetyGuard, hold_trajectory
from .hold import HOLD, RUN, STOP, HoldState, LimitCounter, MeasuredJoints
from .limits import UNGUARDED, OutputLimits, limit_table_problems, limits_of_outputs, unguarded_lines
from .scaling import cap_norm, scale_step

__all__ = ["UNGUARDED", "DEFAULT_BLEND_S", "HOLD", "RUN", "STOP", "HoldState", "LimitCounter", "MeasuredJoints", "OutputGuard",
           "OutputLimits", "SafetyGuard", "cap_norm", "limit_table_problems", "limits_of_outputs", "scale_step",
           "hold_trajectory", "unguarded_lines"]
