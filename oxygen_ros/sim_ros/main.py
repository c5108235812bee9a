"""`oxygen_sim_node`: start the simulated robot.

    oxygen_sim_node --params-file config/demo_sim.yaml
    oxygen_sim_node --ros-args -p episodes:=5 -p seed:=100 -r __ns:=/arm
    oxygen_sim_node --exit-with-parent ...     # stops when its launcher dies (as oxygen_node, see main.py)
    oxygen_sim_node --params-file config/aloha_sim.yaml            # backend: aloha, the MuJoCo ALOHA

Exit codes: 0 after the last episode (with exit_when_done) or SIGINT/SIGTERM, 1 for invalid parameters,
2 for a bad command line.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Sequence

from oxygen_ros.ros.main import Options, parse_options, require_params_files, signal_when_parent_dies

USAGE = (
    "usage: oxygen_sim_node [--exit-with-parent] [--params-file PATH]... [--ros-args ...]\n"
    "  the simulated robot: the table-top arm (backend: tabletop, config/demo_sim.yaml) or the MuJoCo ALOHA\n"
    "  (backend: aloha, config/aloha_sim.yaml, config/aloha_demo_sim.yaml)\n"
    "  --exit-with-parent  stop cleanly (as on SIGTERM) when the process that started it dies (Linux)\n"
    "  --params-file PATH  ROS 2 parameters YAML (same as --ros-args --params-file PATH); repeatable,\n"
    "                      later files override earlier ones\n"
    "  --ros-args ...      standard ROS arguments (-p episodes:=5, -r __ns:=/arm, --params-file, ...)"
)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = parse_options(sys.argv if argv is None else argv, USAGE, ("--exit-with-parent",))
        return _run(require_params_files(options, "oxygen_sim_node"))
    except SystemExit as exc:
        return int(exc.code or 0)


def _run(options: Options) -> int:
    args, parent = options.args, os.getppid()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # until the node exists: as Ctrl-C (see main.py)
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    try:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        node = _make_node(_backend())
    except KeyboardInterrupt:  # stopped while starting: nothing to clean up yet
        rclpy.try_shutdown()
        return 0
    except Exception as exc:  # ConfigError for bad parameters, or a params file that does not parse
        print(f"oxygen_sim_node: error: {exc}", file=sys.stderr, flush=True)
        rclpy.try_shutdown()
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if options.exit_with_parent and not signal_when_parent_dies(parent):
        node.get_logger().warning("--exit-with-parent: not supported here (Linux only); stop the node with SIGINT")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    if hasattr(node, "start"):  # the ALOHA backend runs its lockstep loop in a thread of its own
        node.start()
    try:
        while not stop.is_set() and rclpy.ok():
            executor.spin_once(timeout_sec=0.05)
            if node.done.is_set() and node.v["exit_when_done"]:
                break
    finally:
        if hasattr(node, "shutdown"):
            node.shutdown()
        node.flush()
        executor.shutdown(timeout_sec=5.0)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def _backend() -> str:
    """The ``backend`` parameter as given (params file or -p), read before the node of that backend exists."""
    from rclpy.node import Node

    # Only `backend` is declared: declaring every override would fail on an empty list (no type to declare it
    # with), e.g. demo_sim.yaml's `instructions: []`.
    probe = Node("oxygen_sim_node")
    try:
        value = probe.declare_parameter("backend", "tabletop").value
    finally:
        probe.destroy_node()
    return str(value)


def _make_node(backend: str):  # noqa: ANN202
    from oxygen_ros.interface.param_spec import ConfigError

    from oxygen_ros.sim_ros.sim_node import BACKENDS, OxygenSimNode

    if backend == "aloha":
        from oxygen_ros.sim_ros.aloha_sim_node import AlohaSimNode  # imports MuJoCo: only when asked for

        return AlohaSimNode()
    if backend != "tabletop":
        raise ConfigError(f"bad parameter: backend must be one of {list(BACKENDS)}, got {backend!r}")
    return OxygenSimNode()


if __name__ == "__main__":
    sys.exit(main())
