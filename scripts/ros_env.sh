# Sourced by every project script that starts rclpy: DDS traffic must never leave this machine.
# Kilted ignores ROS_LOCALHOST_ONLY; ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST is the switch.
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
unset ROS_STATIC_PEERS
# A per-run domain so parallel runs on one machine never see each other (0..101 are safe ids).
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$(( (RANDOM % 100) + 1 ))}"
export ROS_LOG_DIR="${ROS_LOG_DIR:-${TMPDIR:-/tmp}/oxygen_ros_log}"
mkdir -p "$ROS_LOG_DIR"
export HOME="${HOME:-${TMPDIR:-/tmp}}"
