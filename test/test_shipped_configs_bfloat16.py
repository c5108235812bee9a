"""Every shipped robot config runs `oxygen-replay offline` in bfloat16 on this CPU and on an AVX2-only one.

Each config (config/robots/*.yaml, config/pi05_robot.yaml) gets its FILL_IN values: a tiny checkpoint of the
config's layout, robot and statistics, a tokenizer and a calibration, then ``device: cpu``. A scene bag made on
its topics is replayed with ``-p dtype=bfloat16`` (what a config on a laptop or an older robot computer asked
for before ``auto``), once here and once in a process held to AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2
ATEN_CPU_CAPABILITY=avx2``: no oneDNN bfloat16 path, as on such a CPU): chunks come out, the log says which
products ran, and no traceback.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from layouts import REF_TINY, lerobot_folder, openpi_converted, openpi_norm_stats, random_model, stats_arrays
from oxygen_ros.model.network.cpu_bfloat16 import onednn_bfloat16_refusal
from oxygen_ros.model.tokenizers.tokenizer import train_tokenizer

CONFIG = Path(__file__).resolve().parents[1] / "config"
SHIPPED = {"aloha": CONFIG / "robots" / "aloha.yaml", "droid": CONFIG / "robots" / "droid.yaml",
           "libero": CONFIG / "robots" / "libero.yaml", "so101": CONFIG / "robots" / "so101.yaml",
           "pi05_robot": CONFIG / "pi05_robot.yaml"}  # fmt: skip
# so101: one (range_min, range_max) per motor, as LeRobot's calibration file gives them
CALIBRATION = ["758, 3290", "812, 3307", "885, 3112", "851, 3196", "140, 3970", "2020, 3405"]
AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
CPUS = ["this_cpu", pytest.param("avx2_only", marks=pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"), reason="the AVX2 caps exist on x86 only"))]


def checkpoint(robot: str, folder: Path) -> Path:
    """A tiny checkpoint shaped as the one the config is written for (layout, action width, asset id)."""
    if robot == "so101":
        return lerobot_folder(folder, random_model(REF_TINY.replace(action_dim=6)), stats_arrays(6, -100.0, 100.0, seed=9),
                              stats_arrays(6, -150.0, 150.0, seed=10),
                              cameras=("observation.images.front", "observation.images.wrist"))  # fmt: skip
    # robot → (action width, chunk length, state width, action width of the statistics, openpi asset id)
    shapes = {"aloha": (16, 50, 14, 14, "trossen"), "droid": (8, 10, 8, 8, "droid"), "libero": (7, 10, 8, 7, "libero"),
              "pi05_robot": (7, 10, 8, 7, "libero")}  # fmt: skip
    width, horizon, state, action, asset = shapes[robot]
    stats = openpi_norm_stats(stats_arrays(state, -1.5, 1.5, seed=3), stats_arrays(action, -1.0, 1.0, seed=4))
    return openpi_converted(folder, random_model(REF_TINY.replace(action_dim=width, action_horizon=horizon)), stats, asset)


def filled(robot: str, tmp_path: Path) -> dict[str, Any]:
    """The shipped parameters with every FILL_IN given, on this machine's CPU with a small KV pool."""
    values = yaml.safe_load(SHIPPED[robot].read_text())["/**"]["ros__parameters"]
    tokenizer = tmp_path / "tok" / "tokenizer.model"
    train_tokenizer(tokenizer, 400)
    for key in ("joint_conversions", "output_conversions"):  # so101's calibration, one motor per FILL_IN pair
        fill = iter(CALIBRATION)
        values[key] = [";".join(part.replace("FILL_IN, FILL_IN", next(fill)) if "FILL_IN" in part else part
                                for part in text.split(";")) for text in values.get(key, [])]  # fmt: skip
    values.update(checkpoint=str(checkpoint(robot, tmp_path / f"pi05_{robot}")), tokenizer=str(tokenizer), device="cpu",
                  kv_budget_mb=16.0, num_threads=1)  # fmt: skip
    assert "FILL" not in json.dumps(values), "a FILL_IN value left"
    return values


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("robot", sorted(SHIPPED))
def test_shipped_config_replays_offline_in_bfloat16(robot: str, cpu: str, tmp_path: Path) -> None:
    values = filled(robot, tmp_path)
    assert values["dtype"] == "auto"  # the faster dtype on each CPU unless a config asks for one
    params = tmp_path / f"{robot}.yaml"
    params.write_text(yaml.safe_dump({"/**": {"ros__parameters": values}}))
    bag, out, summary = tmp_path / "scene.mcap", tmp_path / "out.mcap", tmp_path / "summary.json"
    cli = [sys.executable, "-m", "oxygen_ros.replay.cli"]
    env = {**os.environ, **(AVX2_ONLY if cpu == "avx2_only" else {})}
    size = f"{values.get('camera_widths', [64])[0]}x{values.get('camera_heights', [48])[0]}"  # what the config expects
    made = subprocess.run([*cli, "make-demo", str(bag), "--params-file", str(params), "--duration", "0.6",
                           "--image-size", size, "-q"], env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    # Compiled back-ends (pi05_robot: auto) run as shipped on the AVX2 path; on this CPU test_compiled.py and
    # test_compiled_prefill.py run them, and the eager ones keep this test short.
    eager = ["-p", "action_backend=eager", "-p", "prefill_backend=eager"] if cpu == "this_cpu" else []
    done = subprocess.run([*cli, "offline", str(bag), "-o", str(out), "--params-file", str(params), "-p", "dtype=bfloat16",
                           *eager, "--summary", str(summary), "-q"], env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    record = json.loads(summary.read_text())
    assert record["chunks"] >= 2 and record["model"]["dtype"] == "bfloat16", (record["skipped"], record["inputs"])
    assert "missing_joint_state" not in record["skipped"]  # the scene has each config's joint-state topics
    refused = cpu == "avx2_only" or onednn_bfloat16_refusal() is not None
    line = "dtype bfloat16: plain bfloat16 products" if refused else "dtype bfloat16: bfloat16 products in oneDNN"
    assert record["model"]["dtype_choice"].startswith(line) and line in done.stdout  # in the report
    assert (line in done.stderr) == refused  # the slow path is also a warning on stderr
