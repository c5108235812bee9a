"""Full-size loading in one copy: a mid-size checkpoint loads with a peak resident memory of at most 1.15x its
weights (measured in a subprocess, so nothing else in the test process counts), in both the direct path
(stored dtype = loaded dtype) and the chunked, converting path; and the streamed reader reproduces
safetensors' own tensors exactly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from oxygen_ros.model.checkpoints.checkpoint import save_checkpoint
from oxygen_ros.model.network.config import BENCH
from oxygen_ros.model.checkpoints.tensor_stream import TensorFileError, TensorReader
from oxygen_ros.model.network.vla import Pi05Model

# The benchmark's pi0.5-shaped model (257k vocabulary): ~106 M parameters, 212 MB in bfloat16.
MID = BENCH


@pytest.fixture(scope="module")
def mid_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Pi05Model(MID)
    model = model.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    root = tmp_path_factory.mktemp("mid")
    out = {"float32": save_checkpoint(model, root / "f32", layout="openpi")}
    out["bfloat16"] = save_checkpoint(model.to(torch.bfloat16), root / "bf16", layout="openpi")
    return out


def peak(checkpoint: Path, dtype: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "oxygen_ros.bench.probes.load_memory", str(checkpoint), "--dtype", dtype],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("stored", ["bfloat16", "float32"])
def test_peak_resident_memory_is_one_copy_of_the_weights(mid_checkpoints: dict[str, Path], stored: str) -> None:
    result = peak(mid_checkpoints[stored], "bfloat16")
    assert result["weights_bytes"] > 150e6  # a model big enough for the ratio to mean something
    assert result["host_peak_over_weights"] <= 1.15, result


def test_streamed_tensors_equal_safetensors_own(mid_checkpoints: dict[str, Path]) -> None:
    path = mid_checkpoints["float32"] / "model.safetensors"
    reference = load_file(str(path))
    with TensorReader(path) as reader:
        assert set(reader.entries) == set(reference)
        for key in list(reference)[:40]:
            direct = reader.read(key)
            assert torch.equal(direct, reference[key]) and direct.data_ptr() % 64 == 0
            converted = reader.read(key, torch.bfloat16, chunk_bytes=4096)  # many chunks
            assert torch.equal(converted, reference[key].to(torch.bfloat16))
            assert reader.equals(key, reference[key])
        key = next(iter(reference))
        changed = reference[key].clone()
        changed.view(-1)[-1] += 1.0
        assert not reader.equals(key, changed, chunk_bytes=4096)


def test_truncated_file_is_a_clear_error(mid_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    data = (mid_checkpoints["bfloat16"] / "model.safetensors").read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TensorFileError, match="beyond the end of the file"):
        TensorReader(cut)
    (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 4)
    with pytest.raises(TensorFileError, match="too short"):
        TensorReader(tmp_path / "junk.safetensors")
