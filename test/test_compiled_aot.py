"""Ahead-of-time compiled artefacts (``model/backends/compiled_aot.py``, ``model/backends/compiled_store.py``): a later start
loads the compiled function instead of tracing it, with the same results; another key never loads it; a
corrupt file is logged and rebuilt; processes starting together compile once."""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from compiler_needed import needs_compiler
from oxygen_ros.model.backends.compiled_aot import COUNTERS, AotCompiledFunction
from oxygen_ros.model.backends.compiled_store import MAGIC, artefact_key

pytestmark = needs_compiler


def block(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(model(x)) * x.sum(-1, keepdim=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(8, 8).eval()


def compiled(folder: Path, model: nn.Module, config: str = "a") -> AotCompiledFunction:
    return AotCompiledFunction("test block", block, (model,), None, {"config": config}, folder)


def call(fn: AotCompiledFunction, rows: int) -> torch.Tensor:
    x = torch.linspace(-1, 1, rows * 8).reshape(rows, 8)
    torch._dynamo.mark_dynamic(x, 0)
    with torch.inference_mode():
        return fn(x)


def count(what: str) -> int:
    return counters[COUNTERS].get(what, 0)


def test_a_second_instance_loads_the_artefact_and_serves_every_length_equal_to_eager(tmp_path: Path) -> None:
    model = make_model()
    first = compiled(tmp_path, model)
    compiled_before = count("compiled")
    out = call(first, 5)
    assert count("compiled") == compiled_before + 1 and first.path is not None and first.path.exists()
    loaded_before, compiled_before = count("loaded"), count("compiled")
    second = compiled(tmp_path, model)  # what a later start does: read the file, trace nothing
    for rows in (5, 3, 17):
        x = torch.linspace(-1, 1, rows * 8).reshape(rows, 8)
        torch.testing.assert_close(call(second, rows), block(model, x), rtol=1e-5, atol=1e-6)
    assert torch.equal(call(second, 5), out)
    assert count("loaded") == loaded_before + 1 and count("compiled") == compiled_before


def test_another_configuration_or_torch_names_another_artefact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_model()
    call(compiled(tmp_path, model, "a"), 4)
    other = compiled(tmp_path, model, "b")
    assert other.path != compiled(tmp_path, model, "a").path
    compiled_before, loaded_before = count("compiled"), count("loaded")
    call(other, 4)
    assert count("compiled") == compiled_before + 1 and count("loaded") == loaded_before
    base = artefact_key(name="x", config="a")
    assert artefact_key(name="x", config="b") != base and artefact_key(name="y", config="a") != base
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert artefact_key(name="x", config="a") != base


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "valid checksum, not a pickle",
                                    "a variant that does not load"])
def test_a_corrupt_artefact_is_logged_and_rebuilt(tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    model = make_model()
    first = compiled(tmp_path, model)
    expected = call(first, 6)
    path = first.path
    assert path is not None
    data = bytearray(path.read_bytes())
    if damage == "flipped byte":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncated":
        data = data[: len(data) // 3]
    else:
        payload = b"not a pickle" if damage.startswith("valid") else pickle.dumps([b"not a compiled function"])
        data = bytearray(MAGIC + hashlib.sha256(payload).digest() + payload)
    path.write_bytes(bytes(data))
    compiled_before = count("compiled")
    with caplog.at_level(logging.WARNING):
        again = compiled(tmp_path, model)
        torch.testing.assert_close(call(again, 6), expected)
    assert count("compiled") == compiled_before + 1
    words = ("corrupt", "unreadable", "did not load")
    assert any(any(w in r.getMessage() for w in words) and str(path) in r.getMessage() for r in caplog.records)
    assert len(again._file.read()) == 1  # rewritten: valid again, the unloadable variant dropped


def test_a_shape_no_variant_accepts_adds_a_variant_to_the_file(tmp_path: Path) -> None:
    model = make_model()
    fn = compiled(tmp_path, model)
    with torch.inference_mode():
        fn(torch.ones(4, 8))  # no dynamic marks: a graph for 4 rows only
        fn(torch.ones(6, 8))  # another variant
    loaded_before, compiled_before = count("loaded"), count("compiled")
    again = compiled(tmp_path, model)
    with torch.inference_mode():
        torch.testing.assert_close(again(torch.ones(6, 8)), block(model, torch.ones(6, 8)))
        again(torch.ones(4, 8))
    assert count("loaded") == loaded_before + 2 and count("compiled") == compiled_before


def test_artefacts_off_compiles_through_inductor_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OXYGEN_ROS_AOT_ARTEFACTS", "0")
    model = make_model()
    fn = compiled(tmp_path, model)
    assert fn.path is None
    torch.testing.assert_close(call(fn, 3), block(model, torch.linspace(-1, 1, 24).reshape(3, 8)), rtol=1e-5, atol=1e-6)
    assert not list(tmp_path.iterdir())


_START = """
import json, sys, torch
from torch._dynamo.utils import counters
sys.path.insert(0, {test_dir!r})
from test_compiled_aot import COUNTERS, call, compiled, make_model
from pathlib import Path
out = call(compiled(Path({folder!r}), make_model()), 7)
print(json.dumps({{"counters": dict(counters[COUNTERS]), "out": out.flatten().tolist()}}))
"""


def test_processes_starting_together_compile_once_and_agree(tmp_path: Path) -> None:
    script = _START.format(test_dir=str(Path(__file__).parent), folder=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-2000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    assert sorted(r["counters"].get("compiled", 0) for r in results) == [0, 1]  # the second waited and loaded
    assert sorted(r["counters"].get("loaded", 0) for r in results) == [0, 1]
    assert results[0]["out"] == results[1]["out"]
