"""`oxygen_node` in its own process (DDS on loopback) started on a LeRobot pi05 folder (with
the Hugging Face tokenizer folder LeRobot users have) and on an openpi converted folder (statistics next to it,
as the converter leaves them), and refusing an openpi folder that has no statistics with one line."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from oxygen_ros_msgs.msg import ActionChunk
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState

from layouts import REF_TINY, lerobot_folder, openpi_converted, openpi_norm_stats, random_model, stats_arrays
from oxygen_ros.model.tokenizers.tokenizer import train_tokenizer
from oxygen_ros.interface.convert import array_to_image, ns_to_stamp
from ros_helpers import Collector, NodeProcess, make_test_node, spin_until, wait_for_match, write_params

RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
JOINTS = [f"j{i}" for i in range(1, 8)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("node_ckpts")
    tok = root / "tok" / "tokenizer.model"
    train_tokenizer(tok, 400)
    state, action = stats_arrays(7, -1.5, 2.5, seed=1), stats_arrays(7, 100.0, 104.0, seed=2)
    model = random_model(REF_TINY.replace(num_image_slots=2, action_horizon=12), seed=3)
    lerobot = lerobot_folder(root / "pi05", model, state, action, n_action_steps=6,
                             cameras=("observation.images.wrist", "observation.images.top"))  # fmt: skip
    openpi = openpi_converted(root / "pi05_libero" / "pytorch", random_model(seed=4), openpi_norm_stats(state, action),
                              "physical-intelligence/libero", in_parent=True)  # fmt: skip
    bare = openpi_converted(root / "openpi" / "converted", random_model(), None)
    from transformers import GemmaTokenizer

    hf = GemmaTokenizer.from_pretrained(tok.parent, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    hf.save_pretrained(root / "paligemma-hf")
    return SimpleNamespace(root=root, tok=tok, hf_tok=root / "paligemma-hf", lerobot=lerobot, openpi=openpi, bare=bare)


CASES = {
    "lerobot": (
        {"camera_features": ["top", "wrist"]}, 12,
        ["model: lerobot layout, chunk length 12 (n_action_steps 6), prompt format pi05_state, resize bilinear",
         "0:observation.images.wrist <- /cam/wrist/image_raw, 1:observation.images.top <- /cam/top/image_raw"],
    ),
    "openpi": (
        {"prompt_format": "pi05"}, 10,
        ["model: openpi layout, chunk length 10, prompt format pi05, resize pil, statistics quantile (openpi formulas",
         "0:base_0_rgb <- /cam/top/image_raw, 1:left_wrist_0_rgb <- /cam/wrist/image_raw, 2:right_wrist_0_rgb <- (masked)"],
    ),
}  # fmt: skip


def params(folders: SimpleNamespace, checkpoint: Path, **extra: object) -> dict[str, object]:
    return {
        "checkpoint": str(checkpoint), "tokenizer": str(folders.tok),
        "camera_topics": ["/cam/top/image_raw", "/cam/wrist/image_raw"],
        "joint_names": JOINTS, "task_names": ["language"], "task_prompts": [" Subtask:"], "task_every_n_frames": [1],
        "task_max_tokens": [3], "control_rate_hz": 4.0, "num_threads": 1, "kv_budget_mb": 16.0,
        "max_observation_age_s": 2.0, "diagnostics_period_s": 0.5, "publish_trajectory": False,
        # Longer than the tiny model's 96 prompt tokens: cut, counted, and the chunk still goes out.
        "default_instruction": " ".join(["pick up the red cup and put it in the blue bowl"] * 8), **extra,
    }  # fmt: skip


@pytest.fixture(scope="module")
def ros_context():
    rclpy.init()
    yield
    rclpy.shutdown()


@pytest.mark.parametrize("layout", list(CASES))
def test_node_runs_each_folder(ros_context, folders: SimpleNamespace, tmp_path: Path, layout: str) -> None:
    extra, horizon, lines = CASES[layout]
    checkpoint, tokenizer = (folders.lerobot, folders.hf_tok) if layout == "lerobot" else (folders.openpi, folders.tok)
    node, executor = make_test_node("ckpt_test_driver")
    top = node.create_publisher(Image, "/cam/top/image_raw", qos_profile_sensor_data)
    wrist = node.create_publisher(Image, "/cam/wrist/image_raw", qos_profile_sensor_data)
    joints = node.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
    chunks = Collector(node, ActionChunk, "/oxygen_node/action_chunk", RELIABLE)
    diagnostics = Collector(node, DiagnosticArray, "/diagnostics", RELIABLE)
    rgb = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)

    def publish() -> None:
        stamp = node.get_clock().now().nanoseconds
        top.publish(array_to_image(rgb, "rgb8", stamp=stamp))
        wrist.publish(array_to_image(rgb[::-1].copy(), "rgb8", stamp=stamp))
        msg = JointState(name=JOINTS, position=[0.1, -0.2, 0.3, 0.0, 0.5, -0.6, 0.02])
        msg.header.stamp = ns_to_stamp(stamp)
        joints.publish(msg)

    def truncated() -> int:
        for msg in reversed(diagnostics.messages):
            for status in msg.status:
                if status.name.endswith(": inputs"):
                    return int({kv.key: kv.value for kv in status.values}.get("prompts_truncated", 0))
        return 0

    values = params(folders, checkpoint, tokenizer=str(tokenizer), **extra)
    proc = NodeProcess([write_params(tmp_path / "p.yaml", values)]).start()
    try:
        assert wait_for_match(executor, [top, chunks.subscription], timeout=60), proc.output()
        ok = spin_until(executor, lambda: len(chunks) >= 2 and truncated() > 0 or not proc.running, 90, every=(0.1, publish))
        assert ok and proc.running, proc.output()[-4000:]
        out = proc.output()
        for line in lines:
            assert line in out, out[-4000:]
        chunk = chunks.messages[-1]
        assert (chunk.horizon, chunk.action_dim) == (horizon, 7)
        assert 95 < np.mean(chunk.data) < 110  # unnormalized with the processor files' statistics
    finally:
        proc.close()
        executor.shutdown()
        node.destroy_node()


def test_node_refuses_a_checkpoint_without_statistics(folders: SimpleNamespace, tmp_path: Path) -> None:
    values = params(folders, folders.bare)
    proc = NodeProcess([write_params(tmp_path / "p.yaml", values)]).start()
    try:
        code = proc.wait(120)
        out = proc.output()
        assert code not in (None, 0), out
        lines = [line for line in out.splitlines() if "no normalization statistics" in line]
        assert len(lines) == 1 and "norm_mode: none" in lines[0] and "norm_stats:" in lines[0], out
        assert f"{folders.bare}/assets/<asset_id>/norm_stats.json" in lines[0]
    finally:
        proc.close()
