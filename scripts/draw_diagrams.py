"""Draw the documentation's diagrams from real runs, so they cannot drift from the code.

    bash scripts/in_netns.sh .venv/bin/python scripts/draw_diagrams.py            # both
    bash scripts/in_netns.sh .venv/bin/python scripts/draw_diagrams.py topics     # the node's topic graph
    .venv/bin/python scripts/draw_diagrams.py timeline                            # one tick, from a trace

* ``topics`` starts ``oxygen_node`` (managed, autostarted, on ``config/demo_policy.yaml``) in its own process
  and asks the ROS graph what that node subscribes to, publishes and serves (with each endpoint's QoS), the
  way ``ros2 node info`` does: the picture is what the code declares, not a hand-typed list. DDS stays on
  loopback (LOCALHOST discovery, a random domain; run it through ``scripts/in_netns.sh`` as root).
* ``timeline`` makes a synthetic scene bag (``oxygen-replay make-demo``), replays it with
  ``oxygen-replay offline --record-latencies`` and draws consecutive control ticks from the output bag's
  ActionChunk latencies (prefill, chunk) and the replay summary's decode timing, against each tick's deadline.

Both write PNGs into docs/images/ (``--out`` to change) and print where.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HIDDEN_TOPICS = {"/rosout", "/parameter_events"}
NODE_NAME = "oxygen_node"


# ------------------------------------------------------------------------------------------ topic graph
@dataclass
class Endpoint:
    topic: str
    type: str
    qos: str = ""


@dataclass
class NodeGraph:
    name: str
    subscriptions: list[Endpoint] = field(default_factory=list)
    publishers: list[Endpoint] = field(default_factory=list)
    actions: list[Endpoint] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    source: str = ""  # the parameter file the node ran with


def graph_record(graph: NodeGraph) -> dict:
    """What the picture shows, as JSON: test_diagrams compares it with a fresh run of the node."""
    return dataclasses.asdict(graph)


def _short_type(t: str) -> str:
    return t.replace("/msg/", "/").replace("/action/", "/")


def _qos_text(info: object) -> str:
    profile = info.qos_profile  # type: ignore[attr-defined]
    reliability = profile.reliability.name.lower().replace("_", " ")
    durability = profile.durability.name.lower().replace("_", " ")
    return reliability if durability == "volatile" else f"{reliability}, {durability}"


def introspect_node(params_file: Path, timeout_s: float = 120.0) -> NodeGraph:
    """Start oxygen_node and read its endpoints from the ROS graph once it is active."""
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.pop("ROS_STATIC_PEERS", None)
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 100)))
    os.environ.setdefault("ROS_LOG_DIR", os.path.join(tempfile.gettempdir(), "oxygen_ros_log"))
    import rclpy
    from rclpy.action.graph import get_action_server_names_and_types_by_node

    node_cmd = [sys.executable, "-c", "from oxygen_ros.ros.main import main; main()", "--lifecycle", "--autostart",
                "--params-file", str(params_file)]  # fmt: skip
    proc = subprocess.Popen(node_cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    context = rclpy.Context()  # its own context: callers (tests) may hold the default one
    rclpy.init(context=context)
    probe = rclpy.create_node("oxygen_diagram_probe", context=context)
    try:
        deadline = time.monotonic() + timeout_s
        previous, stable_since = None, time.monotonic()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"oxygen_node exited with code {proc.returncode}: {proc.stderr.read()[-2000:]}")
            time.sleep(0.2)
            graph = _read_graph(probe, get_action_server_names_and_types_by_node)
            snapshot = (len(graph.subscriptions), len(graph.publishers), len(graph.actions))
            if snapshot != previous:
                previous, stable_since = snapshot, time.monotonic()
            active = any(e.topic.endswith("/action_chunk") for e in graph.publishers)
            if active and time.monotonic() - stable_since > 2.0:
                graph.source = _shown(params_file)
                return graph
            if time.monotonic() > deadline:
                raise RuntimeError(f"oxygen_node did not become active within {timeout_s:.0f} s")
    finally:
        probe.destroy_node()
        rclpy.shutdown(context=context)
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _read_graph(probe: object, action_servers: object) -> NodeGraph:
    graph = NodeGraph(NODE_NAME)
    names = dict((n, ns) for n, ns in probe.get_node_names_and_namespaces())  # type: ignore[attr-defined]
    if NODE_NAME not in names:
        return graph
    ns = names[NODE_NAME]

    def endpoints(pairs: list, info_of: object) -> list[Endpoint]:
        out = []
        for topic, types in pairs:
            if topic in HIDDEN_TOPICS or "/_action/" in topic:
                continue
            infos = [i for i in info_of(topic) if i.node_name == NODE_NAME]  # type: ignore[operator]
            out.append(Endpoint(topic, _short_type(types[0]), _qos_text(infos[0]) if infos else ""))
        return sorted(out, key=lambda e: e.topic)

    graph.subscriptions = endpoints(probe.get_subscriber_names_and_types_by_node(NODE_NAME, ns),  # type: ignore[attr-defined]
                                    probe.get_subscriptions_info_by_topic)  # type: ignore[attr-defined]
    graph.publishers = endpoints(probe.get_publisher_names_and_types_by_node(NODE_NAME, ns),  # type: ignore[attr-defined]
                                 probe.get_publishers_info_by_topic)  # type: ignore[attr-defined]
    graph.actions = [Endpoint(n, _short_type(t[0])) for n, t in action_servers(probe, NODE_NAME, ns)]  # type: ignore[operator]
    graph.services = sorted(n for n, _ in probe.get_service_names_and_types_by_node(NODE_NAME, ns)  # type: ignore[attr-defined]
                            if "/_action/" not in n)
    return graph


def draw_topic_graph(graph: NodeGraph, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    rows = max(len(graph.subscriptions), len(graph.publishers), 1)
    height = 1.2 + 0.62 * rows + (1.3 if graph.actions else 0.0)
    fig, ax = plt.subplots(figsize=(13, height))
    ax.set_xlim(0, 13)
    ax.set_ylim(0, height)
    ax.axis("off")
    top = height - 0.5
    node_y0 = height - 0.9 - 0.62 * rows
    ax.add_patch(FancyBboxPatch((5.4, node_y0), 2.2, top - node_y0 - 0.1, boxstyle="round,pad=0.05",
                                fc="#dce9f7", ec="#2b5d8a", lw=1.5))  # fmt: skip
    node_mid = (top + node_y0) / 2
    ax.text(6.5, node_mid + 0.15, f"/{graph.name}", ha="center", va="center", fontsize=12, weight="bold")
    ax.text(6.5, node_mid - 0.25, "managed node\n(lifecycle)", ha="center", va="center", fontsize=8.5, color="#444")

    def column(endpoints: list[Endpoint], x_text: float, arrow: tuple[float, float]) -> None:
        for i, e in enumerate(endpoints):
            y = top - 0.35 - 0.62 * i
            ax.text(x_text, y + 0.1, e.topic, va="center", fontsize=9.5, family="monospace", weight="bold")
            ax.text(x_text, y - 0.14, f"{e.type}   [{e.qos}]" if e.qos else e.type, va="center", fontsize=8, color="#555")
            ax.annotate("", xy=(arrow[1], y), xytext=(arrow[0], y), arrowprops=dict(arrowstyle="->", color="#2b5d8a", lw=1.2))

    column(graph.subscriptions, 0.2, (4.3, 5.4))
    column(graph.publishers, 8.7, (7.6, 8.6))
    ax.text(0.2, height - 0.12, "subscriptions", fontsize=10, color="#2b5d8a", va="top")
    ax.text(8.7, height - 0.12, "publishers", fontsize=10, color="#2b5d8a", va="top")
    for i, a in enumerate(graph.actions):
        y = node_y0 - 0.75 - 0.5 * i
        ax.annotate("", xy=(6.5, node_y0 - 0.05), xytext=(6.5, y + 0.2), arrowprops=dict(arrowstyle="<->", color="#8a2b5d"))
        ax.text(6.5, y, f"action server {a.topic}  ({a.type})", ha="center", va="center", fontsize=9.5,
                family="monospace", color="#8a2b5d")  # fmt: skip
    lifecycle = [s.rsplit("/", 1)[-1] for s in graph.services if s.rsplit("/", 1)[-1] in
                 ("change_state", "get_state", "get_available_states", "get_available_transitions", "get_transition_graph")]  # fmt: skip
    note = (f"oxygen_node --lifecycle --autostart on {graph.source}, read from the ROS graph\n"
            f"plus {len(graph.services)} services: lifecycle ({', '.join(lifecycle)}) and parameters; "
            "/rosout and /parameter_events not shown")  # fmt: skip
    ax.text(6.5, 0.12, note, ha="center", va="bottom", fontsize=7.5, color="#666")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------ tick timeline
@dataclass
class Tick:
    time_s: float  # the tick, from the bag's start
    observation_s: float  # the observation's stamp, from the bag's start
    prefill_s: float
    action_s: float


def record_trace(workdir: Path, params_file: Path, duration_s: float, extra_params: list[str]) -> tuple[list[Tick], dict]:
    """Run make-demo + offline --record-latencies; return the ticks with a chunk and the replay summary."""
    scene, out, summary_path = workdir / "scene.mcap", workdir / "out.mcap", workdir / "summary.json"
    replay = [sys.executable, "-m", "oxygen_ros.replay.cli"]
    subprocess.run([*replay, "make-demo", str(scene), "--duration", str(duration_s), "--params-file", str(params_file),
                    "--overwrite", "-q"], cwd=ROOT, check=True)  # fmt: skip
    params = [a for p in extra_params for a in ("-p", p)]
    subprocess.run([*replay, "offline", str(scene), "-o", str(out), "--params-file", str(params_file), *params,
                    "--record-latencies", "--summary", str(summary_path), "--overwrite", "-q"], cwd=ROOT, check=True)  # fmt: skip
    summary = json.loads(summary_path.read_text())
    from oxygen_ros.replay.bagio import BagReader

    ticks = []
    t0 = summary["bag_start_ns"]
    with BagReader(out) as reader:
        for m in reader.messages([summary["topics"]["action_chunk"]]):
            msg = reader.deserialize(m)
            obs_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            ticks.append(Tick((m.timestamp_ns - t0) / 1e9, (obs_ns - t0) / 1e9, msg.prefill_latency_s, msg.action_latency_s))
    return ticks, summary


def draw_timeline(ticks: list[Tick], summary: dict, path: Path, n_ticks: int, caption: str) -> Path:
    """``n_ticks`` control ticks after the first (which pays one-time warm-ups): per tick the prefill and the
    chunk where one was computed (ticks between chunks only decode), then the k batched decode steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    period = summary["timing"]["control_period_s"]
    k = summary["tokens_per_frame"]
    decode_tick = summary["timing"]["decode_s"].get("p50", 0.0)  # the k decode steps of one tick
    by_tick = {round(t.time_s / period): t for t in ticks}
    fig, ax = plt.subplots(figsize=(12, 3.2))
    colors = {"prefill": "#4c72b0", "chunk": "#dd8452", "decode": "#55a868"}
    labelled: set[str] = set()

    def bar(kind: str, left: float, width: float, label: str) -> None:
        ax.barh(1.0, width, left=left, height=0.5, color=colors[kind], ec="white", lw=0.6,
                label=None if kind in labelled else label)  # fmt: skip
        labelled.add(kind)

    for n in range(1, 1 + n_ticks):
        start = n * period
        ax.axvline(start, color="#999", lw=0.8, ls=":")
        ax.axvline(start + period, color="#c44e52", lw=1.2)
        work_end = start
        chunk = by_tick.get(n)
        if chunk is not None:
            bar("prefill", start, chunk.prefill_s, "prefill (once per frame)")
            bar("chunk", start + chunk.prefill_s, chunk.action_s, "action chunk (10 Euler steps on the shared prefix)")
            work_end = start + chunk.prefill_s + chunk.action_s
            if start - chunk.observation_s > 0.01 * period:  # the observation's age at the tick
                ax.plot([chunk.observation_s, start], [1.45, 1.45], color="#666", lw=0.9)
            ax.plot([chunk.observation_s], [1.45], "o", color="#666", ms=3.5,
                    label=None if "obs" in labelled else "camera frame the chunk is computed from")  # fmt: skip
            labelled.add("obs")
        for j in range(k):
            bar("decode", work_end + j * decode_tick / k, decode_tick / k, f"batched decode steps (k = {k} here; the node fills the slack)")
    ax.plot([], [], color="#999", lw=0.8, ls=":", label="control tick (timer)")
    ax.plot([], [], color="#c44e52", lw=1.2, label="deadline (the next tick)")
    ax.set_xlim(period * 0.95, (n_ticks + 1) * period * 1.02)
    ax.set_ylim(0.5, 1.8)
    ax.set_yticks([])
    ax.set_xlabel("time since the bag's first message (s); control ticks every %.0f ms" % (period * 1000))
    ax.set_title(caption, fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, fontsize=8.5, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _shown(path: Path) -> str:
    """A path as the repository names it (no machine paths in committed pictures)."""
    full = path.resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else path.name


def _machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", nargs="*", choices=("topics", "timeline"), default=["topics", "timeline"])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images", help="folder for the PNGs")
    ap.add_argument("--params-file", type=Path, default=ROOT / "config" / "demo_policy.yaml")
    ap.add_argument("--timeline-params-file", type=Path, default=ROOT / "config" / "demo_policy.yaml",
                    help="the replay's node parameters (default: the demo's trained policy)")  # fmt: skip
    ap.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                    help="override a node parameter of the timeline's replay (repeatable)")  # fmt: skip
    ap.add_argument("--ticks", type=int, default=6, help="ticks drawn in the timeline")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of synthetic scene for the timeline")
    args = ap.parse_args(argv)
    if "topics" in args.which:
        graph = introspect_node(args.params_file)
        record = args.out / "topic_graph.json"
        record.write_text(json.dumps(graph_record(graph), indent=1) + "\n")
        print(f"wrote {draw_topic_graph(graph, args.out / 'topic_graph.png')} and {record}")
    if "timeline" in args.which:
        with tempfile.TemporaryDirectory() as tmp:
            ticks, summary = record_trace(Path(tmp), args.timeline_params_file, args.duration, args.param)
        if not ticks:
            print("the replay produced no action chunk; nothing to draw", file=sys.stderr)
            return 1
        overrides = f", {' '.join(args.param)}" if args.param else ""
        caption = (f"oxygen-replay offline --record-latencies, {_shown(args.timeline_params_file)}{overrides}; "
                   f"{_machine()}, load average {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d')}")  # fmt: skip
        print(f"wrote {draw_timeline(ticks, summary, args.out / 'tick_timeline.png', args.ticks, caption)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
