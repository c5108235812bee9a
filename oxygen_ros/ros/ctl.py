"""``oxygen-ctl``: stop, resume, ask and status of a running ``oxygen_node``, without ros2cli (not on PyPI).

    oxygen-ctl stop                      # ~/set_stop true: every command stops within one control period
    oxygen-ctl resume                    # ~/set_stop false: commands resume with the next chunk
    oxygen-ctl ask "what do you see?"    # ~/ask: the answer streamed as it is decoded
    oxygen-ctl status                    # the node's statuses on /diagnostics (state, safety, control, inputs, ...)
    oxygen-ctl --node /arm1/oxygen_node --robot left stop

What ``ros2 service call``, ``ros2 action send_goal`` and ``ros2 topic echo /diagnostics`` do on a robot with
ROS (docs/safety.md, docs/ros.md). DDS stays on this machine unless the environment says otherwise
(``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` when unset); ``ROS_DOMAIN_ID`` must be the node's.

Exit codes: 0 done; 1 the node did not answer in time, refused or failed (one line on stderr says which);
2 a bad command line; 130 interrupted (an open question is cancelled first).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

NODE = "/oxygen_node"
DIAGNOSTICS = "/diagnostics"
DISCOVERY_TIMEOUT_S = 15.0  # DDS discovery takes 0.3 s or about 3 s at random on loopback (more on a busy machine)
ANSWER_TIMEOUT_S = 120.0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="oxygen-ctl", description=__doc__.split("\n\n")[0].split(": ", 1)[1].replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="examples:\n" + "\n".join(line.strip() for line in __doc__.split("\n\n")[1].splitlines()))
    p.add_argument("--node", default=NODE, help="the node's full name, namespace included (default %(default)s)")
    p.add_argument("--robot", default="", help="of a node serving several robots (its `robots` parameter): which one "
                   "stop, resume and ask address (status shows every robot's)")
    p.add_argument("--timeout", type=float, default=DISCOVERY_TIMEOUT_S,
                   help="seconds to wait for the node to answer (default %(default)s)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("stop", help="stop every command (the outputs hold; the model and its text go on)")
    sub.add_parser("resume", help="clear the stop: commands resume with the next chunk, from the measured position")
    ask = sub.add_parser("ask", help="ask a question; the answer streams to stdout as it is decoded")
    ask.add_argument("question")
    ask.add_argument("--max-tokens", type=int, default=0, help="answer length limit (default 0: the node's ask_max_tokens)")
    ask.add_argument("--answer-timeout", type=float, default=ANSWER_TIMEOUT_S,
                     help="seconds to wait for the whole answer (default %(default)s)")
    status = sub.add_parser("status", help="the node's statuses on /diagnostics, once")
    status.add_argument("--values", action="store_true", help="every status's key values too")
    return p


def node_path(node: str, robot: str, leaf: str) -> str:
    """The absolute name of a node's private ``~/<leaf>`` (for ``robot``: as the node names it for that robot,
    ``<namespace>/<robot>/<node>/<leaf>``)."""
    node = "/" + node.strip("/")
    namespace, _, name = node.rpartition("/")
    return f"{namespace}/{robot.strip('/')}/{name}/{leaf}" if robot else f"{node}/{leaf}"


def keep_dds_local(env: Any = os.environ) -> None:
    """DDS on this machine unless the environment chose otherwise (as the project's scripts/ros_env.sh does)."""
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.timeout <= 0 or (args.command == "ask" and (args.answer_timeout <= 0 or args.max_tokens < 0)):
        print("oxygen-ctl: --timeout and --answer-timeout must be positive, --max-tokens not negative", file=sys.stderr)
        return 2
    keep_dds_local()
    import rclpy  # after the command line: --help stays instant

    rclpy.init(args=["oxygen-ctl"])
    node = rclpy.create_node(f"oxygen_ctl_{os.getpid()}")
    try:
        if args.command in ("stop", "resume"):
            return _set_stop(node, args, args.command == "stop")
        if args.command == "ask":
            return _ask(node, args)
        return _status(node, args)
    except KeyboardInterrupt:
        return 130
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def _fail(message: str) -> int:
    print(f"oxygen-ctl: {message}", file=sys.stderr, flush=True)
    return 1


def _spin_until(node: Any, done: Any, timeout_s: float) -> bool:
    import rclpy

    deadline = time.monotonic() + timeout_s
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        rclpy.spin_once(node, timeout_sec=min(0.1, remaining))
    return True


def _set_stop(node: Any, args: argparse.Namespace, stop: bool) -> int:
    from std_srvs.srv import SetBool

    name = node_path(args.node, args.robot, "set_stop")
    client = node.create_client(SetBool, name)
    if not _spin_until(node, client.service_is_ready, args.timeout):
        return _fail(f"no node offers {name} within {args.timeout:g} s: is it running, with this ROS_DOMAIN_ID "
                     f"({os.environ.get('ROS_DOMAIN_ID', '0')})? --node and --robot name it")
    future = client.call_async(SetBool.Request(data=stop))
    if not _spin_until(node, future.done, args.timeout):
        return _fail(f"{name} did not answer within {args.timeout:g} s")
    response = future.result()
    if not response.success:
        return _fail(f"{name} refused: {response.message}")
    print(f"{'stop set' if stop else 'stop cleared'} on {name.rsplit('/', 1)[0]}: {response.message}", flush=True)
    return 0


def _ask(node: Any, args: argparse.Namespace) -> int:
    from oxygen_ros_msgs.action import Ask
    from rclpy.action import ActionClient

    name = node_path(args.node, args.robot, "ask")
    client = ActionClient(node, Ask, name)
    if not _spin_until(node, client.server_is_ready, args.timeout):
        return _fail(f"no node offers the action {name} within {args.timeout:g} s: is it running, with this "
                     f"ROS_DOMAIN_ID ({os.environ.get('ROS_DOMAIN_ID', '0')})? --node and --robot name it")
    streamed: list[str] = []

    def on_feedback(msg: Any) -> None:
        streamed.append(msg.feedback.text)
        sys.stdout.write(msg.feedback.text)
        sys.stdout.flush()

    sent = client.send_goal_async(Ask.Goal(question=args.question, max_tokens=args.max_tokens), feedback_callback=on_feedback)
    if not _spin_until(node, sent.done, args.timeout) or not sent.result().accepted:
        return _fail(f"{name} did not accept the question within {args.timeout:g} s")
    goal = sent.result()
    result = goal.get_result_async()
    try:
        answered = _spin_until(node, result.done, args.answer_timeout)
    except KeyboardInterrupt:
        goal.cancel_goal_async()
        _spin_until(node, result.done, 2.0)
        print(file=sys.stdout, flush=True)
        raise
    if not answered:
        goal.cancel_goal_async()
        _spin_until(node, result.done, 2.0)
        return _fail(f"no whole answer within {args.answer_timeout:g} s: the question was cancelled")
    answer = result.result().result
    if "".join(streamed) != answer.answer:  # feedback lost on the way: the whole answer is the result's
        sys.stdout.write(("\n" if streamed else "") + answer.answer)
    print(flush=True)
    if answer.finish_reason in ("refused", "error", "cancelled"):
        return _fail(f"{answer.finish_reason}: {answer.message}")
    print(f"({answer.finish_reason}; from frame {answer.frame_seq})", file=sys.stderr, flush=True)
    return 0


def _status(node: Any, args: argparse.Namespace) -> int:
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    target = "/" + args.node.strip("/")
    got: list[Any] = []

    def publisher_node(info: Any) -> str | None:
        """The full name of the node that published a message (its publisher's gid among /diagnostics')."""
        gid = list((info.get("publisher_gid") or {}).get("data") or [])
        for endpoint in node.get_publishers_info_by_topic(DIAGNOSTICS):
            known = list(endpoint.endpoint_gid)
            if known and gid[: len(known)] == known:
                return f"{endpoint.node_namespace.rstrip('/')}/{endpoint.node_name}"
        return None

    def on_message(msg: Any, info: Any) -> None:
        if not got and publisher_node(info) == target:
            got.append(msg)

    node.create_subscription(DiagnosticArray, DIAGNOSTICS, on_message,
                             QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))  # fmt: skip
    if not _spin_until(node, lambda: bool(got), args.timeout):
        publishers = sorted(f"{e.node_namespace.rstrip('/')}/{e.node_name}" for e in node.get_publishers_info_by_topic(DIAGNOSTICS))
        return _fail(f"no /diagnostics from {target} within {args.timeout:g} s (publishing there: "
                     f"{', '.join(publishers) or 'none'})")
    levels = {_level(DiagnosticStatus.OK): "OK", _level(DiagnosticStatus.WARN): "WARN",
              _level(DiagnosticStatus.ERROR): "ERROR", _level(DiagnosticStatus.STALE): "STALE"}  # fmt: skip
    print(target)
    for status in got[0].status:
        level = levels.get(_level(status.level), "?")
        print(f"  {level:5} {status.name}: {status.message}")
        if args.values:
            for kv in status.values:
                print(f"          {kv.key} = {kv.value}")
    return 0


def _level(value: bytes | int) -> int:
    """A DiagnosticStatus level (a one-byte field: bytes in rclpy) as a number."""
    return value[0] if isinstance(value, bytes) else int(value)


if __name__ == "__main__":
    sys.exit(main())
