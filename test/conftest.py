"""Test configuration: DDS stays on loopback, always.

Every test process gets ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a per-run ROS_DOMAIN_ID before
anything can import rclpy. As root, the whole pytest run re-executes itself inside a fresh network
namespace that has only a loopback interface (the same thing scripts/in_netns.sh does).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile

os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.pop("ROS_STATIC_PEERS", None)
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 100)))
os.environ.setdefault("ROS_LOG_DIR", os.path.join(tempfile.gettempdir(), "oxygen_ros_test_log"))
os.makedirs(os.environ["ROS_LOG_DIR"], exist_ok=True)


def _reexec_in_loopback_namespace() -> None:
    if os.geteuid() != 0 or os.environ.get("OXYGEN_IN_NETNS") or shutil.which("unshare") is None:
        return
    os.environ["OXYGEN_IN_NETNS"] = "1"
    argv = [sys.executable, "-m", "pytest", *sys.argv[1:]]
    os.execvp("unshare", ["unshare", "-n", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv])


_reexec_in_loopback_namespace()
