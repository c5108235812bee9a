"""LeRobot 0.6.1's own ``RobotClient`` (its environment from scripts/extra_envs.py, Python 3.12), unchanged, with
fake SO-101 robots, served by ``oxygen-serve --protocol lerobot``: two and four robots at once, each in its own
process (its own gRPC connection, as robots on their own machines); the first chunk each client unpickled
equals the runtime's chunk for the same observation and the robot performs it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from extra_env import extra_python
from layouts import REF_TINY
from lerobot_shapes import SO101_JOINTS, so101_observation
from lerobot_so101 import TASK, expected_chunks, so101_params
from openpi_client_env import LOOPBACK_ENV, oxygen_serve

CHECKS = Path(__file__).with_name("lerobot_client_checks.py")
CAMERAS = {"front": (60, 80), "wrist": (48, 64)}
CLIENT_TIMEOUT_S = 600.0  # each process imports torch and lerobot on a busy 2-core machine


@pytest.mark.parametrize("robots", [2, 4])
def test_lerobots_robot_clients_get_the_runtimes_chunks(tmp_path: Path, robots: int) -> None:
    python = extra_python("lerobot-0.6.1")
    params = so101_params(tmp_path)
    observation = so101_observation(np.random.default_rng(11), CAMERAS, TASK)
    source = tmp_path / "observation.npz"
    np.savez(source, state=np.array([observation[f"{j}.pos"] for j in SO101_JOINTS]), front=observation["front"],
             wrist=observation["wrist"], task=np.array(TASK))  # fmt: skip
    expected = expected_chunks(params, observation, robots)
    checkpoint = str(tmp_path / "pi05_so101")
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **LOOPBACK_ENV, "OMP_NUM_THREADS": "1"}
    with oxygen_serve(params, "--max-clients", str(robots), protocol="lerobot", log_dir=tmp_path) as served:
        clients = []
        for i in range(robots):
            folder = tmp_path / f"client{i}"  # the client writes logs/ into its working folder
            folder.mkdir()
            clients.append(subprocess.Popen([str(python), str(CHECKS), str(served.port), checkpoint, str(source),
                                             str(folder / "done")], cwd=folder, env=env, text=True,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE))  # fmt: skip
        outputs = []
        for client in clients:
            out, err = client.communicate(timeout=CLIENT_TIMEOUT_S)
            assert client.returncode == 0, f"RobotClient failed ({client.returncode}):\n{out[-2000:]}\n{err[-4000:]}\n{served.log[-3000:]}"
            outputs.append(json.loads(out.strip().splitlines()[-1]))
    unmatched = list(range(robots))
    for result in outputs:
        assert result["classes"] == ["lerobot.async_inference.helpers.TimedAction"]
        assert result["timesteps"] == list(range(REF_TINY.action_horizon))  # actions_per_chunk 20: the whole chunk
        chunk = np.array(result["first_chunk"])
        match = [i for i in unmatched if np.allclose(chunk, expected[i], rtol=0, atol=1e-4)]
        assert match, f"a chunk equal to none of the runtime's: {chunk[:2]} vs {[e[:2] for e in expected]}"
        unmatched.remove(match[0])
        np.testing.assert_allclose(result["performed"][0], chunk[0], rtol=0, atol=1e-6)  # the robot ran it
    assert "refused" not in served.log


def test_hostile_pickles_and_a_stream_without_its_end_from_lerobots_own_stubs(tmp_path: Path) -> None:
    python = extra_python("lerobot-0.6.1")
    params = so101_params(tmp_path)
    marker = tmp_path / "ran"
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **LOOPBACK_ENV}
    with oxygen_serve(params, "--max-clients", "2", protocol="lerobot", log_dir=tmp_path) as served:
        done = subprocess.run([str(python), str(CHECKS), "hostile", str(served.port), str(tmp_path / "pi05_so101"),
                               str(marker)], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=CLIENT_TIMEOUT_S)  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        codes = json.loads(done.stdout.strip().splitlines()[-1])
        assert served.process.poll() is None
    assert not marker.exists()
    assert codes["setup"].startswith("INVALID_ARGUMENT") and "posix.system" in codes["setup"]
    assert codes["good_setup"] == "OK"
    assert codes["observation"].startswith("INVALID_ARGUMENT") and "not one of the allowed globals" in codes["observation"]
    assert codes["no_end"].startswith("INVALID_ARGUMENT") and "without a TRANSFER_END" in codes["no_end"]
