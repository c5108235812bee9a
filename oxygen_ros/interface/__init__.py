"""The node's interface without a node: the declared parameters and their validation, conversion between
ROS messages and plain values, the input store, trajectory messages and the rosbags type store.

Only message classes are imported here, never rclpy: the node (`oxygen_ros.ros`) and the offline tools
(`oxygen-replay offline`, `oxygen-sim eval`) share this package.
"""
