"""bfloat16 on each CPU kind: the path this CPU takes, and the AVX2-only path forced on any x86 CPU.

oneDNN packs bfloat16 weights only with AVX-512 (BW/VL/DQ) or AVX-NE-CONVERT; an AVX2-only CPU has no oneDNN
bfloat16 path at all. ``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2`` holds oneDNN and torch's own kernels
to AVX2 in a fresh process, which is how these tests run that CPU's path on a newer one (on an AVX2-only CPU
the caps change nothing and this CPU's path is the same one).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

import bfloat16_paths
from oxygen_ros.model.network.cpu_bfloat16 import (NATIVE_BFLOAT16_FLAGS, cpu_flags, native_bfloat16_cpu,
                                                   onednn_bfloat16_refusal, resolve_dtype)
from oxygen_ros.runtime import RuntimeConfig

HERE = Path(__file__).resolve().parent
AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
x86_only = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the AVX2 caps exist on x86 only")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def capped(args: list[str], timeout_s: float = 900.0) -> subprocess.CompletedProcess[str]:
    """``python args`` in test/ with the CPU held to AVX2."""
    env = {**os.environ, **AVX2_ONLY, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout_s)


def assert_close_to_float32(record: dict) -> None:
    assert record["finite"] and record["tokens"] > 0
    # bfloat16 keeps 8 bits of mantissa: actions within a few hundredths of float32's, never equal by accident
    assert 0 < record["max_abs_diff"] < 0.05 * max(record["max_abs"], 1.0)


def test_auto_is_bfloat16_where_the_cpu_runs_it_natively() -> None:
    native = bool(NATIVE_BFLOAT16_FLAGS & cpu_flags()) and onednn_bfloat16_refusal() is None
    assert native_bfloat16_cpu() == native
    assert resolve_dtype("auto", "cpu") == ("bfloat16" if native else "float32")
    assert resolve_dtype("auto", "cuda") == "bfloat16"
    assert resolve_dtype("bfloat16", "cpu") == "bfloat16" and resolve_dtype("float32", "cuda") == "float32"
    with pytest.raises(ValueError, match=r"dtype must be one of \['auto', 'float32', 'bfloat16'\]"):
        RuntimeConfig(dtype="float16").validate()


def test_this_cpu_runs_bfloat16_on_the_path_it_has() -> None:
    record = bfloat16_paths.record()
    packs = onednn_bfloat16_refusal() is None
    assert record["can_pack"] == packs and (record["packed_bytes"] > 0) == packs
    assert record["bfloat16_runtime_dtype"] == "bfloat16" and record["auto_runtime_dtype"] == resolve_dtype("auto", "cpu")
    assert len(record["lines"]) == 1 and len(record["auto_lines"]) == 1
    path = "bfloat16 products in oneDNN" if packs else "plain bfloat16 products in torch's own kernels, nothing packed"
    assert path in record["lines"][0]
    assert_close_to_float32(record)


@x86_only
def test_an_avx2_only_cpu_runs_bfloat16_plainly_and_auto_takes_float32() -> None:
    done = capped(["bfloat16_paths.py"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["cpu_capability"] == "AVX2"
    assert "bf16 path needs the cpu support" in record["refusal"]  # oneDNN's own reason, passed on
    assert not record["can_pack"] and record["packed_bytes"] == 0
    assert record["auto"] == record["auto_runtime_dtype"] == "float32"
    assert record["bfloat16_runtime_dtype"] == "bfloat16"  # an explicit bfloat16 is kept, on the plain products
    [line] = record["lines"]
    assert line.startswith("dtype bfloat16: plain bfloat16 products") and "dtype auto picks float32" in line
    [auto_line] = record["auto_lines"]
    assert auto_line.startswith("dtype auto: float32") and "no bfloat16 path" in auto_line
    assert_close_to_float32(record)


@x86_only
def test_the_packed_decode_tests_pass_on_an_avx2_only_cpu() -> None:
    done = capped(["-m", "pytest", "test_packed_decode.py", "-q", "-p", "no:cacheprovider"])
    assert done.returncode == 0, done.stdout[-3000:]
    # the packed-copy tests skip there (the runtime packs nothing), the rest run the plain path
    assert "3 skipped" in done.stdout and " passed" in done.stdout and "failed" not in done.stdout
