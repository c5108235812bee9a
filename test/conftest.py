"""Test configuration: DDS stays on loopback, always.

Every test process gets ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a per-run ROS_DOMAIN_ID before
anything can import rclpy. As root, the whole pytest run re-executes itself inside a fresh network
namespace that has only a loopback interface (the same thing scripts/in_netns.sh does). With
OXYGEN_SKIP_REPORT set, the run writes its skips and their reasons there (test/skip_report.py).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.pop("ROS_STATIC_PEERS", None)
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 100)))
os.environ.setdefault("ROS_LOG_DIR", os.path.join(tempfile.gettempdir(), "oxygen_ros_test_log"))
os.makedirs(os.environ["ROS_LOG_DIR"], exist_ok=True)


def pytest_configure(config) -> None:  # noqa: ANN001 (pytest hook)
    if os.geteuid() != 0 or os.environ.get("OXYGEN_IN_NETNS") or shutil.which("unshare") is None:
        _record_skips(config)
        return
    # Give the terminal back before exec: pytest has already redirected fds 1/2 into its capture files.
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.suspend_global_capture(in_=True)
    os.environ["OXYGEN_IN_NETNS"] = "1"
    argv = [sys.executable, "-m", "pytest", *config.invocation_params.args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp("unshare", ["unshare", "-n", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv])


def _record_skips(config) -> None:  # noqa: ANN001 (pytest config)
    """Write every skip and its reason to $OXYGEN_SKIP_REPORT when set (.ci/run checks them)."""
    from skip_report import REPORT_ENV, SkipRecorder

    if os.environ.get(REPORT_ENV):
        config.pluginmanager.register(SkipRecorder(Path(os.environ[REPORT_ENV])), "oxygen_skip_report")


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny models run fastest on one thread: on a busy 2-core machine a second intra-op thread only adds
    barrier waits and spins against other processes. Restored for the other test modules."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture()
def ros():  # noqa: ANN201
    """rclpy for one test: a plain node for the test's side and the executor that spins it."""
    import rclpy
    from ros_helpers import make_test_node

    rclpy.init()
    node, executor = make_test_node("test_driver")
    yield node, executor
    executor.shutdown()
    node.destroy_node()
    rclpy.shutdown()
