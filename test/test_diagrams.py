"""The committed topic graph (docs/images/topic_graph.png and .json) is what the node really offers.

Starts `oxygen_node` on config/demo_policy.yaml in its own process (DDS on loopback), reads its
subscriptions, publishers, action servers and services from the ROS graph with the same code that drew the
picture, and compares them with the committed record.
"""

from __future__ import annotations

import json
from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
REGENERATE = "bash scripts/in_netns.sh .venv/bin/python scripts/draw_diagrams.py topics"


def test_the_committed_topic_graph_matches_the_running_node() -> None:
    draw = load_script("draw_diagrams")
    graph = draw.introspect_node(ROOT / "config" / "demo_policy.yaml")
    committed = json.loads((ROOT / "docs" / "images" / "topic_graph.json").read_text())
    assert draw.graph_record(graph) == committed, f"the node's endpoints changed: run `{REGENERATE}` and commit docs/images/topic_graph.*"
    topics = {e.topic for e in graph.subscriptions + graph.publishers}
    assert {"/oxygen_node/action_chunk", "/diagnostics", "/joint_states"} <= topics
    assert [a.topic for a in graph.actions] == ["/oxygen_node/ask"]
