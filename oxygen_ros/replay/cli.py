"""``oxygen-replay``: make a demo bag, replay a bag offline through the policy, or play a bag live.

Exit codes: 0 success (warnings go to stderr), 1 an ``eval`` over its thresholds, 3 an ``eval`` judged on a damaged bag, 2 a problem with the inputs (missing or damaged bag, bad
parameters file, model that fails to load, bad arguments) reported as one ``oxygen-replay: error:``
line, 130 an offline replay interrupted with Ctrl-C (its partial output bag is removed). A live replay
stopped with Ctrl-C or SIGTERM ends cleanly with 0.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence, TextIO

import yaml

PROG = "oxygen-replay"
EXAMPLES = """examples:
  oxygen-replay make-demo demo.mcap --params-file config/demo.yaml
  oxygen-replay offline demo.mcap -o demo_out.mcap --params-file config/demo.yaml --summary summary.json
  oxygen-replay play demo.mcap --rate 1.0 --wait-for-subscribers 10
  oxygen-replay eval expert.mcap --params-file config/aloha_demo.yaml --max-mae 0.05 --compare other.yaml
  oxygen-replay record -o robot.mcap --params-file config/aloha_demo.yaml   # the node's inputs and outputs
"""


class CliError(Exception):
    """Reported as one error line; exit code 2."""


# ------------------------------------------------------------------------------------------ progress
class Progress:
    """A throttled one-line progress report on stderr (redrawn in place on a terminal, a line every few
    seconds otherwise); calling it with fraction 1.0 always prints."""

    def __init__(self, label: str, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.label = label
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = 0.25 if self.tty else 5.0
        self._last = 0.0
        self._width = 0

    def __call__(self, fraction: float, text: str) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if fraction < 1.0 and now - self._last < self.interval:
            return
        self._last = now
        line = f"{self.label}: {min(max(fraction, 0.0), 1.0) * 100:5.1f}%  {text}"
        if self.tty:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
        self._width = 0


def _warn(text: str) -> None:
    print(f"{PROG}: warning: {text}", file=sys.stderr)


# ------------------------------------------------------------------------------------------- parsing
def _positive(kind: type = float):
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _image_size(text: str) -> tuple[int, int]:
    try:
        w, _, h = text.lower().partition("x")
        return int(w), int(h or w)
    except ValueError:
        raise argparse.ArgumentTypeError(f"image size must be WIDTHxHEIGHT (e.g. 128x96) or one number, got {text!r}") from None


def _add_common(p: argparse.ArgumentParser, remap: bool = True) -> None:
    if remap:
        p.add_argument("--remap", action="append", default=[], metavar="/OLD:=/NEW",
                       help="rename a topic (repeatable); applies to the bag's topics and to the outputs")  # fmt: skip
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")


def _add_params(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params-file", metavar="YAML",
                   help="the node's parameters file ({node: {ros__parameters: {...}}} or a plain mapping); "
                   "default: the package's config/demo.yaml")  # fmt: skip
    p.add_argument("--node-name", metavar="NAME",
                   help="which node's parameters to use when the file has several (also the '~' of topic names)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Bag tools for oxygen_ros: demo bags, deterministic offline replay, live replay.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser("make-demo", help="write a synthetic demo scene (cameras, joint states, instruction) as a bag",
                          description="Write a deterministic synthetic scene as a ROS 2 bag: a coloured cube moving on "
                          "a table seen by each configured camera, 7 smoothly moving joints and the instruction. "
                          "Topics, joint names and the instruction follow --params-file when given.")  # fmt: skip
    demo.add_argument("output", help="output bag: NAME.mcap / NAME.db3 (one file) or a folder name (rosbag2 folder)")
    _add_params(demo)
    demo.add_argument("--duration", type=_positive(), default=5.0, metavar="S", help="seconds of scene (default 5)")
    demo.add_argument("--camera-rate", type=_positive(), default=10.0, metavar="HZ", help="images per second per camera (default 10)")
    demo.add_argument("--joint-rate", type=_positive(), default=50.0, metavar="HZ", help="joint states per second (default 50)")
    demo.add_argument("--image-size", type=_image_size, default=(128, 96), metavar="WxH", help="image size (default 128x96)")
    demo.add_argument("--seed", type=int, default=0, help="scene seed: same seed, same bag (default 0)")
    demo.add_argument("--instruction", help="instruction text (default: the params file's default_instruction or a built-in one)")
    demo.add_argument("--storage", choices=("mcap", "sqlite3"), help="storage of a folder bag (default mcap; files follow their suffix)")
    demo.add_argument("--overwrite", action="store_true", help="replace an existing output bag")
    _add_common(demo, remap=False)

    off = sub.add_parser("offline", help="run the policy on a bag at its recorded times and write the outputs to a new bag",
                         description="Deterministic offline replay (no DDS): inputs are kept as the node keeps them, control "
                         "ticks fall at the bag's first message + n / control_rate_hz, and the outputs (ActionChunk, "
                         "JointTrajectory, TextDelta and final String per task) are written to a new bag stamped at the "
                         "tick times. Same bag, parameters and seed → byte-identical outputs.")  # fmt: skip
    off.add_argument("bag", help="input bag (.mcap, .db3 or rosbag2 folder)")
    off.add_argument("-o", "--output", help="output bag (default: <bag>_oxygen.mcap next to the input)")
    _add_params(off)
    off.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                     help="override one node parameter (YAML value), e.g. -p engine_mode=sequential (repeatable)")  # fmt: skip
    off.add_argument("--tokens-per-frame", type=_positive(int), metavar="K",
                     help="decode steps per tick (default: the parameter, or 4 when it is 0 = deadline-driven)")  # fmt: skip
    off.add_argument("--seed", type=int, help="action noise seed (default: the 'seed' parameter)")
    off.add_argument("--no-drain", action="store_true", help="cancel unfinished text at the end instead of decoding it to the end")
    off.add_argument("--record-latencies", action="store_true",
                     help="write measured latencies into the chunks (then outputs differ between runs)")  # fmt: skip
    off.add_argument("--storage", choices=("mcap", "sqlite3"), help="storage of a folder output (default mcap)")
    off.add_argument("--summary", metavar="JSON", help="also write the summary as JSON to this file")
    off.add_argument("--json", action="store_true", help="print the summary as JSON instead of the short report")
    off.add_argument("--overwrite", action="store_true", help="replace an existing output bag")
    _add_common(off)

    play = sub.add_parser("play", help="publish a bag on ROS 2 topics at recorded speed, with /clock",
                          description="Live replay: publish the bag's messages at their recorded pace (times --rate) with "
                          "/clock for nodes running with use_sim_time:=true. Stops at the end of the bag or on Ctrl-C.")  # fmt: skip
    play.add_argument("bag", help="input bag (.mcap, .db3 or rosbag2 folder)")
    play.add_argument("--rate", type=_positive(), default=1.0, help="speed factor (default 1.0)")
    play.add_argument("--loop", action="store_true", help="start again at the end, until Ctrl-C (/clock restarts with the bag)")
    play.add_argument("--no-clock", action="store_true", help="do not publish /clock")
    play.add_argument("--clock-hz", type=_positive(), default=100.0, metavar="HZ", help="/clock messages per bag second (default 100)")
    play.add_argument("--wait-for-subscribers", type=_non_negative, default=0.0, metavar="S",
                      help="before playing, wait up to S seconds until every topic, /clock included, has a subscriber (default 0: no wait)")  # fmt: skip
    play.add_argument("--topics", nargs="+", metavar="TOPIC", help="play only these topics (names after --remap)")
    play.add_argument("--start-offset", type=_non_negative, default=0.0, metavar="S", help="skip the first S seconds of the bag")
    _add_common(play)

    from .eval_cli import add_eval_parser
    from .record_cli import add_record_parser

    add_eval_parser(sub, _add_params, _add_common)
    add_record_parser(sub)
    return parser


def _remaps(specs: Sequence[str]) -> dict[str, str]:
    from .bagio import parse_remaps

    try:
        return parse_remaps(specs)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _overrides(specs: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name.strip():
            raise CliError(f"bad --param {spec!r}: expected NAME=VALUE")
        try:
            out[name.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise CliError(f"bad --param {spec!r}: {exc}") from None
    return out


# -------------------------------------------------------------------------------------------- commands
def _params_file(args: argparse.Namespace) -> str | None:
    """--params-file, else the packaged demo configuration (announced on stderr), else None."""
    if args.params_file:
        return args.params_file
    from .config import default_params_file

    found = default_params_file()
    if found is not None and not args.quiet:
        print(f"{PROG}: using parameters from {found} (choose with --params-file)", file=sys.stderr)
    return str(found) if found is not None else None


def cmd_make_demo(args: argparse.Namespace) -> int:
    from .scene import SceneConfig, scene_for_config, write_demo_bag

    fields = dict(duration_s=args.duration, camera_rate_hz=args.camera_rate, joint_rate_hz=args.joint_rate,
                  image_width=args.image_size[0], image_height=args.image_size[1], seed=args.seed,
                  instruction=args.instruction)  # fmt: skip
    params_file = _params_file(args)
    if params_file or args.node_name:
        from .config import load_replay_config

        scene = scene_for_config(load_replay_config(params_file, node=args.node_name, validate=False), **fields)
    else:
        scene = SceneConfig(**{k: v for k, v in fields.items() if v is not None})
    try:
        scene.validate()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    progress = Progress("make-demo", not args.quiet)
    try:
        info = write_demo_bag(args.output, scene, storage=args.storage, overwrite=args.overwrite, progress=progress)
    finally:
        progress.close()
    counts = ", ".join(f"{t} ×{n}" for t, n in info["topics"].items())
    print(f"wrote {info['path']} ({info['storage']}, {info['duration_s']:.1f} s): {counts}")
    return 0


def _short(text: str, limit: int = 60) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def print_offline_report(summary: dict[str, Any], out: TextIO | None = None) -> None:
    """The short human-readable report of an offline replay."""
    from .eval_report import safety_line

    out = out or sys.stdout
    t = summary["timing"]
    skipped = summary["skipped"]
    print(f"offline replay {summary['bag']} → {summary['output']}", file=out)
    print(f"  engine {summary['engine_mode']}, {summary['tokens_per_frame']} decode steps per tick, seed {summary['seed']}", file=out)
    print(f"  {summary['ticks']} ticks at {summary['control_rate_hz']:g} Hz over {summary['bag_duration_s']:.2f} s of bag: "
          f"{summary['chunks']} chunks, {summary['trajectories']} trajectories, {sum(skipped.values())} skipped"
          + (f" ({', '.join(f'{k} {v}' for k, v in skipped.items())})" if skipped else ""), file=out)  # fmt: skip
    print(f"  guard: {safety_line(summary.get('safety', {}))}", file=out)
    if summary.get("model", {}).get("dtype_choice"):  # a CPU model in bfloat16 or dtype auto: which products ran
        print(f"  {summary['model']['dtype_choice']}", file=out)
    print(f"  text: {summary['tokens']} tokens in {summary['decode_steps']} decode steps", file=out)
    for task, requests in summary["text"].items():
        reasons: dict[str, int] = {}
        for r in requests:
            reasons[r["finish_reason"]] = reasons.get(r["finish_reason"], 0) + 1
        first = f' first: "{_short(requests[0]["text"])}"' if requests else ""
        print(f"    {task}: {len(requests)} requests ({', '.join(f'{k} {v}' for k, v in reasons.items()) or 'none'});{first}", file=out)
    work = t["tick_work_s"]
    if work.get("count"):
        print(f"  wall clock (informational): tick work mean {work['mean'] * 1e3:.1f} ms, max {work['max'] * 1e3:.1f} ms; "
              f"{t['deadline_misses']} of {work['count']} ticks over the {t['control_period_s'] * 1e3:.0f} ms period", file=out)  # fmt: skip


def cmd_offline(args: argparse.Namespace) -> int:
    from .config import load_replay_config
    from .offline import OfflineOptions, default_output, replay_offline

    remap = _remaps(args.remap)
    cfg = load_replay_config(_params_file(args), node=args.node_name, overrides=_overrides(args.param))
    output = Path(args.output) if args.output else default_output(args.bag)
    options = OfflineOptions(storage=args.storage, remap=remap, tokens_per_frame=args.tokens_per_frame, seed=args.seed,
                             drain=not args.no_drain, record_latencies=args.record_latencies, overwrite=args.overwrite)  # fmt: skip
    progress = Progress("offline", not args.quiet)
    try:
        summary = replay_offline(args.bag, output, cfg, options, progress)
    finally:
        progress.close()
    for warning in summary["warnings"]:
        _warn(warning)
    if args.summary:
        try:
            Path(args.summary).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
        except OSError as exc:
            raise CliError(f"cannot write summary {args.summary}: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        print_offline_report(summary)
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    from .play import BagPlayer, PlayOptions

    options = PlayOptions(rate=args.rate, loop=args.loop, clock=not args.no_clock, clock_hz=args.clock_hz,
                          wait_for_subscribers_s=args.wait_for_subscribers, remap=_remaps(args.remap), topics=args.topics,
                          start_offset_s=args.start_offset)  # fmt: skip
    stop = threading.Event()
    progress = Progress("play", not args.quiet)
    def announce() -> None:
        print(f"playing {args.bag} at {args.rate:g}x" + (" (looping)" if args.loop else ""), file=sys.stderr, flush=True)

    player = BagPlayer(args.bag, options, stop_event=stop, progress=progress, log=_warn, on_start=announce)
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = player.play()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        progress.close()
    total = sum(summary.published.values())
    how = "stopped" if summary.stopped else "done"
    print(f"{how}: published {total} messages on {len(summary.published)} topics and {summary.clock_messages} /clock "
          f"messages in {summary.wall_s:.1f} s", file=sys.stderr)  # fmt: skip
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from .config import load_replay_config
    from .eval_cli import cmd_eval as run

    args.remap_map = _remaps(args.remap)
    overrides = _overrides(args.param)

    def load(params: str | None, node: str | None) -> Any:
        return load_replay_config(params or _params_file(args), node=node, overrides=overrides)

    return run(args, load, CliError)


def cmd_record(args: argparse.Namespace) -> int:
    from .record_cli import cmd_record as run  # rclpy only from here on

    return run(args, _remaps(args.remap), CliError)


COMMANDS = {"make-demo": cmd_make_demo, "offline": cmd_offline, "play": cmd_play, "eval": cmd_eval, "record": cmd_record}


def _expected_errors(command: str) -> tuple[type[BaseException], ...]:
    """Errors that mean "bad input" for a command (imported lazily: play must not pull in torch)."""
    from .bagio import BagError

    errors: list[type[BaseException]] = [CliError, BagError]
    if command in ("play", "record"):
        from .play import PlayError

        errors.append(PlayError)
    else:
        from oxygen_ros.runtime import RuntimeLoadError

        from .config import ParamsFileError
        from .offline import ReplayError

        errors += [ParamsFileError, ReplayError, RuntimeLoadError]
        if command == "eval":
            from .evaluate import EvalError

            errors.append(EvalError)
    return tuple(errors)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``oxygen-replay``; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        expected = _expected_errors(args.command)
        return COMMANDS[args.command](args)
    except expected as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
