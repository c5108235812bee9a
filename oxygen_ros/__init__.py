"""oxygen_ros: multi-task pi0.5 VLA inference for ROS 2 (the OxyGen method)."""

__version__ = "0.1.0"
