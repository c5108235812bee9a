"""The command guard: limits in the robot's units, re-timing and step scaling, the hold state (no ROS here)."""

from .guard import DEFAULT_BLEND_S, OutputGuard, SafetyGuard, hold_trajectory
from .hold import HOLD, RUN, STOP, HoldState, LimitCounter, MeasuredJoints
from .limits import UNGUARDED, OutputLimits, limit_table_problems, limits_of_outputs, unguarded_lines
from .refusals import NON_FINITE, OUT_OF_RANGE, Refusal, RefusalCounter, summary_line as refusal_line
from .retime import KINDS, RANGE_TOLERANCE
from .scaling import cap_norm, scale_step

__all__ = ["UNGUARDED", "KINDS", "RANGE_TOLERANCE", "NON_FINITE", "OUT_OF_RANGE", "Refusal", "RefusalCounter", "refusal_line", "DEFAULT_BLEND_S", "HOLD", "RUN", "STOP", "HoldState", "LimitCounter", "MeasuredJoints", "OutputGuard",
           "OutputLimits", "SafetyGuard", "cap_norm", "limit_table_problems", "limits_of_outputs", "scale_step",
           "hold_trajectory", "unguarded_lines"]
