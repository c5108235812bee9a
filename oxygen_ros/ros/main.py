"""`oxygen_node`: start the policy node.

    oxygen_node --ros-args --params-file config/demo.yaml        # the standard ROS way
    oxygen_node --params-file config/demo.yaml                    # the same, shorter
    ros2 run oxygen_ros oxygen_node --ros-args -p control_rate_hz:=10.0
    oxygen_node --lifecycle --autostart --params-file ...         # the managed node, configured + activated
    oxygen_lifecycle_node --params-file ...                       # the managed node, waiting for `configure`
    oxygen_node --exit-with-parent ...                            # stops cleanly when its launcher dies (launch files)

Exit codes: 0 after SIGINT/SIGTERM (live text requests are cancelled and their final deltas published
first; signals repeated within REPEAT_WINDOW_S of the first are the same request, as when a terminal and
`ros2 launch` both forward one Ctrl-C; a later one gives up waiting, code 130), 1 when the parameters are
invalid or the model cannot be loaded (one line on stderr saying why, no traceback; the managed node stays
up unconfigured instead), 2 for a bad command line.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Sequence

USAGE = (
    "usage: oxygen_node [--lifecycle [--autostart]] [--params-file PATH]... [--ros-args ...]\n"
    "  --lifecycle         a managed (lifecycle) node: starts unconfigured, driven by ~/change_state\n"
    "  --autostart         with --lifecycle: configure and activate at start\n"
    "  --exit-with-parent  stop cleanly (as on SIGTERM) when the process that started it dies, e.g. a\n"
    "                      `ros2 launch` killed with SIGTERM, which leaves its children running (Linux)\n"
    "  --params-file PATH  ROS 2 parameters YAML (same as --ros-args --params-file PATH); repeatable,\n"
    "                      later files override earlier ones\n"
    "  --ros-args ...      standard ROS arguments (-p name:=value, -r __ns:=/robot, --params-file, ...)"
)
LIFECYCLE_USAGE = (
    "usage: oxygen_lifecycle_node [--autostart] [--params-file PATH]... [--ros-args ...]\n"
    "  the managed node (oxygen_node --lifecycle): starts unconfigured, driven by ~/change_state\n"
    "  --autostart         configure and activate at start\n"
    + USAGE.split("\n", 3)[3]  # the options after --lifecycle and --autostart, as oxygen_node's
)
NODE_FLAGS = ("--lifecycle", "--autostart", "--exit-with-parent")
SHUTDOWN_TIMEOUT_S = 10.0
GIL_SWITCH_INTERVAL_S = 0.00025
REPEAT_WINDOW_S = 1.0  # a signal within this long after the first is the same shutdown request
BASE_EXECUTOR_THREADS = 4  # + one per open ~/ask goal (each execute callback waits in its own thread)


@dataclass
class Options:
    args: list[str]  # program name + ROS arguments, for rclpy.init
    lifecycle: bool = False
    autostart: bool = False
    exit_with_parent: bool = False


def ros_arguments(argv: Sequence[str]) -> list[str]:
    """Turn the plain `--params-file PATH` convenience (before any --ros-args) into ROS arguments.

    Raises SystemExit(2) with a message for an unknown option or a missing path.
    """
    return parse_options(argv).args


def parse_options(argv: Sequence[str], usage: str = USAGE, node_flags: Sequence[str] = NODE_FLAGS) -> Options:
    """The command line: the node's flags (`node_flags`, of --lifecycle/--autostart/--exit-with-parent) and ROS
    arguments (see `ros_arguments`); `usage` is what --help prints, its program name the one errors carry."""
    plain: list[str] = []
    flags = {flag: False for flag in node_flags}
    program_name = usage.split()[1]
    rest = list(argv)
    program, args = (rest[0], rest[1:]) if rest else ("oxygen_node", [])
    ros: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--ros-args":
            ros = args[i:]
            break
        if arg in ("-h", "--help"):
            print(usage)
            raise SystemExit(0)
        if arg in flags:
            flags[arg] = True
            i += 1
            continue
        if arg == "--params-file" or arg.startswith("--params-file="):
            path = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            if not path:
                _die("--params-file needs a path", code=2, program=program_name)
            plain += ["--params-file", path]
            i += 1 if "=" in arg else 2
            continue
        _die(f"unknown argument {arg!r}\n{usage}", code=2, program=program_name)
    if plain:
        # Plain files first: a --params-file inside --ros-args (given later) overrides them.
        ros = ["--ros-args", *plain, *ros[1:]]
    if flags.get("--autostart") and not flags.get("--lifecycle"):
        _die("--autostart needs --lifecycle (the plain node always starts active)", code=2)
    return Options([program, *ros], flags.get("--lifecycle", False), flags.get("--autostart", False),
                   flags.get("--exit-with-parent", False))  # fmt: skip


def _die(message: str, code: int = 1, program: str = "oxygen_node") -> None:
    print(f"{program}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None, usage: str = USAGE) -> int:
    """Console entry point; returns the exit code."""
    try:
        return _run(require_params_files(parse_options(sys.argv if argv is None else argv, usage)))
    except SystemExit as exc:  # --help, or _die: the message is printed already
        return int(exc.code or 0)


def require_params_files(options: Options, program: str = "oxygen_node") -> Options:
    """The options, after checking that every --params-file names a readable file (rcl's own message for a
    missing one is its YAML parser's "Error opening YAML file, at .../parser.c"); SystemExit(2) saying which."""
    from oxygen_ros.runtime.paths import resolve_data_path, where_looked

    args = list(options.args)
    for i, (flag, path) in enumerate(zip(args, args[1:])):
        if flag != "--params-file":
            continue
        found = resolve_data_path(path)  # a relative path from the working directory, else the package's folders
        if not os.path.isfile(found):
            print(f"{program}: error: --params-file {path}: no such file{where_looked(path)}", file=sys.stderr, flush=True)
            raise SystemExit(2)
        args[i + 1] = found
    return dataclasses.replace(options, args=args)


def lifecycle_main() -> int:
    """`oxygen_lifecycle_node`: the managed node (add --autostart to configure and activate at start)."""
    argv = list(sys.argv)
    return main([argv[0], "--lifecycle", *argv[1:]], LIFECYCLE_USAGE)


class ShutdownRequest:
    """SIGINT/SIGTERM handling: the first signal asks for a clean stop; signals within `window_s` of it are the
    same request (a terminal and `ros2 launch` both forward one Ctrl-C); a later one gives up waiting."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S) -> None:
        self.window_s = window_s
        self.event = threading.Event()
        self._first: float | None = None

    def on_signal(self, signum: int, frame: object) -> None:
        now = time.monotonic()
        if self._first is None:
            self._first = now
            self.event.set()
        elif now - self._first > self.window_s:
            os._exit(130)


def signal_when_parent_dies(parent: int, sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send `sig` to this process when its parent dies (prctl PR_SET_PDEATHSIG); when the parent
    (`parent`, its pid at start) is gone already, the signal comes now. False where the platform cannot."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(1, int(sig), 0, 0, 0) != 0:  # 1 = PR_SET_PDEATHSIG
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # re-parented while the model loaded
        os.kill(os.getpid(), sig)
    return True


def _run(options: Options) -> int:
    args = options.args
    parent = os.getppid()
    # Until the node exists, SIGTERM stops start-up as Ctrl-C does (a supervisor stopping a node that is still
    # loading its model) instead of killing the process outright.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # Imported here so `--help` and argument errors answer without loading rclpy and torch.
    import rclpy
    from rclpy.exceptions import InvalidHandle
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from oxygen_ros.runtime import RuntimeLoadError

    from .lifecycle import OxygenLifecycleNode
    from .node import OxygenNode
    from oxygen_ros.interface.param_spec import ConfigError

    # Every torch op releases the GIL and must take it back. With the executor thread busy in Python
    # (sensor callbacks, /clock), the model thread then waits up to the switch interval per op: at the
    # default 5 ms a 10 ms tick of ~3000 small ops took 0.6-2 s (measured). 0.25 ms bounds that wait.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)

    # Our own signal handling: rclpy's would shut the context down before the final text can go out.
    try:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    except Exception as exc:  # e.g. a params file that does not parse
        _die(f"cannot start ROS: {exc}")
    request = ShutdownRequest()
    stop = request.event
    try:
        node = OxygenLifecycleNode() if options.lifecycle else OxygenNode()
        for sig in (signal.SIGINT, signal.SIGTERM):  # from here on a signal asks for the clean stop below
            signal.signal(sig, request.on_signal)
    except ConfigError as exc:
        rclpy.try_shutdown()
        _die(str(exc))
    except RuntimeLoadError as exc:
        rclpy.try_shutdown()
        _die(f"cannot load the model: {exc}")
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the model loads: nothing to clean up yet
        rclpy.try_shutdown()
        return 0

    if options.exit_with_parent and not signal_when_parent_dies(parent):
        node.get_logger().warning("--exit-with-parent: not supported here (Linux only); stop the node with SIGINT")
    if options.autostart:
        _autostart(node)
    ask_goals = int(node.get_parameter("ask_max_goals").value)
    executor = MultiThreadedExecutor(num_threads=BASE_EXECUTOR_THREADS + ask_goals)
    executor.add_node(node)
    failures: list[BaseException] = []
    halt = threading.Event()  # leaves the spin loop; set only once the node has finished

    def spin() -> None:
        # Our own loop rather than executor.spin(): it leaves on `halt` by itself, so the executor is shut
        # down only after it returned (shutting a MultiThreadedExecutor down under a running spin() can make
        # spin() raise "cannot schedule new futures after shutdown").
        try:
            while not halt.is_set() and rclpy.ok():
                try:
                    executor.spin_once(timeout_sec=0.1)
                except InvalidHandle:
                    # A lifecycle transition destroyed a subscription the executor was waiting on (rclpy
                    # does not catch this case everywhere): the next wait set no longer holds it.
                    continue
        except BaseException as exc:  # a callback raised: stop cleanly, report it below
            failures.append(exc)
            stop.set()

    def close() -> None:
        # The node finishes while the executor still spins, so the last text, the ~/ask results and the
        # acknowledgements still flow; then the executor stops.
        ended = node.finish()
        node.get_logger().info(f"stopped ({ended} text requests cancelled)")
        halt.set()
        spinner.join(timeout=SHUTDOWN_TIMEOUT_S)
        executor.shutdown(timeout_sec=SHUTDOWN_TIMEOUT_S)  # waits for the callbacks in flight
        node.destroy_node()
        rclpy.try_shutdown()

    spinner = threading.Thread(target=spin, name="oxygen-executor", daemon=True)
    spinner.start()
    try:
        while not stop.wait(0.2) and spinner.is_alive():
            pass
    finally:
        stop.set()
        node.get_logger().info("shutting down: cancelling live text requests")
        # Shutdown work runs in its own thread: the main thread only waits in short, interruptible joins, so a
        # repeated signal is handled when it arrives (its time decides whether it is the same request).
        closer = threading.Thread(target=close, name="oxygen-shutdown", daemon=True)
        closer.start()
        while closer.is_alive():
            closer.join(0.05)
    if failures:
        exc = failures[0]
        _die(f"stopped after an internal error: {type(exc).__name__}: {exc}")
    return 0


def _autostart(node: object) -> None:
    """Configure and activate a managed node; a failure leaves it up (unconfigured, the reason logged)."""
    from rclpy.lifecycle import TransitionCallbackReturn

    if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:  # type: ignore[attr-defined]
        node.get_logger().error("autostart: configure failed; the node stays unconfigured")  # type: ignore[attr-defined]
        return
    if node.trigger_activate() != TransitionCallbackReturn.SUCCESS:  # type: ignore[attr-defined]
        node.get_logger().error("autostart: activate failed; the node stays inactive")  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
