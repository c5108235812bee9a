"""``oxygen-replay record``: what ``ros2 bag record`` does, for machines whose ROS comes from the PyPI wheels.

The topics named (or, with ``--params-file``, the node's inputs and outputs; or every topic with ``--all``)
are subscribed as they appear, each with a QoS its publishers can serve, and every message received is written
with ``rosbags`` (CDR as received, stamped with its receipt time on the recorder's clock) to ``.mcap`` or
``.db3``. Ctrl-C or SIGTERM stops it cleanly: the messages already received are written and the bag is closed.
The DDS part lives in ``oxygen_ros.replay.record`` (imported only when recording, as ``play``'s: the other
subcommands need no rclpy).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any



def add_record_parser(sub: Any) -> None:
    rec = sub.add_parser("record", help="record topics from DDS into a bag (Ctrl-C stops it, every received message written)",
                         description="Record ROS 2 topics into a bag with rosbags (no rosbag2 needed). Topics are "
                         "subscribed as they appear; Ctrl-C or SIGTERM ends the recording cleanly.")  # fmt: skip
    rec.add_argument("topics", nargs="*", metavar="TOPIC", help="topics to record (default with --params-file: the node's inputs and outputs)")
    rec.add_argument("-o", "--output", required=True, help="output bag: NAME.mcap / NAME.db3 (one file) or a folder name")
    rec.add_argument("-a", "--all", action="store_true", help="every topic (but /rosout and /parameter_events)")
    rec.add_argument("--params-file", metavar="YAML", help="record the cameras, joint states, instruction, controller outputs, "
                     "chunks and texts this node configuration names")  # fmt: skip
    rec.add_argument("--node-name", metavar="NAME", help="which node's parameters to use when the file has several")
    rec.add_argument("--storage", choices=("mcap", "sqlite3"), help="storage of a folder output (default mcap)")
    rec.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    rec.add_argument("--discovery-period", type=float, default=0.5, metavar="S", help="look for new topics this often (default 0.5 s)")
    rec.add_argument("--use-sim-time", action="store_true", help="stamp messages with /clock's time")
    rec.add_argument("--overwrite", action="store_true", help="replace an existing output bag")
    rec.add_argument("--remap", action="append", default=[], metavar="/OLD:=/NEW", help="record a topic under another name (repeatable)")
    rec.add_argument("-q", "--quiet", action="store_true", help="no messages on stderr")


def config_topics(params_file: str, node: str | None) -> list[str]:
    """The topics a node configuration reads and writes: cameras, joint states, instruction, outputs, chunks, texts."""
    from .config import load_replay_config

    cfg = load_replay_config(params_file, node=node, validate=False)
    topics = [t for t in cfg.camera_topics if t] + [cfg.joint_state_topic]
    topics += [cfg.topic(source.topic) for source in cfg.settings.joint_sources]  # one per arm (ALOHA's puppets)
    topics += [cfg.instruction_topic, cfg.action_chunk_topic]
    topics += [cfg.topic(spec.topic) for spec in cfg.settings.outputs]
    for task in cfg.runtime.tasks:
        topics += [cfg.text_topic(task.name), cfg.final_text_topic(task.name)]
    return list(dict.fromkeys(topics))


def cmd_record(args: argparse.Namespace, remap: dict[str, str], error: type[Exception]) -> int:
    topics = list(args.topics)
    if args.params_file:
        topics += config_topics(args.params_file, args.node_name)
    if not topics and not args.all:
        raise error("name the topics to record, or give --params-file or --all")
    if args.duration is not None and args.duration <= 0:
        raise error("--duration must be > 0")
    from .record import RecordOptions, record  # rclpy from here on

    options = RecordOptions(topics=None if args.all else list(dict.fromkeys(topics)), remap=remap, storage=args.storage,
                            overwrite=args.overwrite, duration_s=args.duration, discovery_period_s=args.discovery_period,
                            use_sim_time=args.use_sim_time)  # fmt: skip
    say = (lambda _: None) if args.quiet else (lambda line: print(f"oxygen-replay: {line}", file=sys.stderr, flush=True))
    summary = record(args.output, options, say)
    print(json.dumps(summary))
    return 0
