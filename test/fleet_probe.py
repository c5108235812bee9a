"""A publisher or a subscriber of one string topic, for the two-host test (test_fleet_hosts.py).

``python fleet_probe.py pub SECONDS`` publishes for SECONDS; ``sub SECONDS`` prints ``received`` and exits as soon
as one message arrives, or prints ``nothing`` after SECONDS."""

import sys
import time

import rclpy
from std_msgs.msg import String


def main() -> None:
    role, seconds = sys.argv[1], float(sys.argv[2])
    rclpy.init()
    node = rclpy.create_node(f"fleet_probe_{role}")
    got: list[str] = []
    end = time.monotonic() + seconds
    if role == "pub":
        pub = node.create_publisher(String, "fleet_probe", 10)
        while time.monotonic() < end:
            pub.publish(String(data="from the other host"))
            rclpy.spin_once(node, timeout_sec=0.1)
    else:
        node.create_subscription(String, "fleet_probe", lambda m: got.append(m.data), 10)
        while time.monotonic() < end and not got:
            rclpy.spin_once(node, timeout_sec=0.1)
        print("received" if got else "nothing", flush=True)
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main()
