"""oxygen-bench runs end to end (tiny preset, one frame per point) and writes what it promises.

No timing is asserted here: speed figures live in the benchmark's own output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from compiler_needed import needs_compiler
from oxygen_ros.bench.report import add_comparisons, interpolate_decode
from oxygen_ros.bench.machine import MATRIX_FEATURES, cpu_flags
from oxygen_ros.bench.workload import bf16_supported
from oxygen_ros.model.backends.compiled import compiler_available
from oxygen_ros.model.network.cpu_bfloat16 import onednn_packs_bfloat16


def run_bench(out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    cmd = [sys.executable, "-m", "oxygen_ros.bench.cli", "--preset", "tiny", "--dtype", "float32", "--frames", "1",
           "--threads", "1", "--out", str(out), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, json.loads((out / "results.json").read_text())


@needs_compiler
def test_bench_with_the_compiled_chunk_reports_both_and_the_before_points(tmp_path: Path) -> None:
    proc, results = run_bench(tmp_path, "--modes", "action_only", "oxygen", "--lengths", "2", "--tokens-per-frame", "1",
                              "--actions", "compiled", "--before", "--eager-prefill")
    parts = results["parts"]
    assert parts["action_fused"] and parts["action_path"] == "compiled" and parts["compile_s"] > 0
    assert parts["prefill_fused"] and parts["prefill_compile_s"] > 0 and parts["prefill_eager_s"] > 0
    assert "action chunk: fused (torch.compile)" in proc.stdout and "prefill: fused (torch.compile)" in proc.stdout
    # real-time chunking through the compiled network, beside its eager form; the prefill beside its matmuls alone
    assert parts["rtc_compile_s"] > 0 and parts["action_rtc_eager_s"] > 0
    assert "real-time chunking: fused (torch.compile)" in proc.stdout
    assert parts["prefill_matmuls"] > 0 and parts["prefill_matmul_s"] > 0 and "prefill floor: P" in proc.stdout
    # the guided chunk's products (forward and input gradients) outweigh the plain chunk's: counted, not timed
    assert parts["action_rtc_matmul_gflop"] > parts["action_matmul_gflop"] > 0
    assert parts["action_rtc_matmul_s"] > 0 and parts["action_matmul_s"] > 0
    assert "real-time chunking floor: A_rtc" in proc.stdout
    # the widest decode step beside its products alone, the text head's among them
    assert parts["decode_matmul_batch"] == max(int(b) for b in parts["decode_s"])
    assert parts["decode_matmuls"] > 1 and parts["decode_head_matmul_s"] > 0  # the layers' products and the head's
    assert f"decode floor: D({parts['decode_matmul_batch']})" in proc.stdout
    assert "before/after (same run" in proc.stdout and "before = eager prefill, all else" in proc.stdout
    assert "share of the action_only frame" in proc.stdout and "share of the oxygen N=2 k=1 frame" in proc.stdout
    assert {r["mode"] for r in results["records"]} == {"action_only", "oxygen"}
    for baseline in ("before", "eager_prefill"):
        assert {(r["mode"], r["decode_len"]) for r in results[baseline]} == {("action_only", 0), ("oxygen", 2)}


def test_bench_cli_writes_results_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    proc, results = run_bench(out, "--lengths", "2", "3", "--tokens-per-frame", "1", "2", "--actions", "eager",
                              "--prefill", "eager")
    assert "timing:" in proc.stderr and "round 1/" in proc.stderr and "memory" in proc.stderr  # progress is shown
    machine = results["run"]["machine"]
    for key in ("cpu_model", "cpu_cores", "cpu_caches", "torch", "torch_threads"):
        assert machine[key], key
    assert machine["torch_threads"] == 1 and results["run"]["command"].startswith("oxygen-bench ")
    # The CPU features that decide the matrix products' speed and `auto`'s dtype: recorded and in the header.
    header = proc.stdout.splitlines()[1]
    assert machine["cpu_features"] == [f for f in MATRIX_FEATURES if f in cpu_flags()]
    assert all(f in header for f in machine["cpu_features"]), header
    native = bool({"avx512_bf16", "amx_bf16"} & set(machine["cpu_features"]))
    assert bf16_supported("cpu") == (native and onednn_packs_bfloat16())  # the runtime's dtype auto
    for text in (proc.stdout, (out / "table.txt").read_text(), (out / "results.json").read_text()):
        assert str(tmp_path) not in text  # no machine paths in what gets pasted or committed
    parts = results["parts"]
    assert parts["action_s"] > 0 and parts["action_eager_s"] > 0 and not parts["action_fused"]
    assert "compiled at start-up in" not in proc.stdout and parts["action_path"] == "eager"
    assert not parts["prefill_fused"] and parts["prefill_eager_s"] > 0
    records = results["records"]
    modes = {r["mode"] for r in records}
    assert modes == {"action_only", "sequential", "parallel", "shared", "oxygen"}
    oxygen = [r for r in records if r["mode"] == "oxygen"]
    assert sorted((r["decode_len"], r["tokens_per_frame"]) for r in oxygen) == [(2, 1), (2, 2), (3, 1), (3, 2)]
    for r in records:
        for key in ("mode", "decode_len", "tokens_per_frame", "action_hz", "tokens_per_s", "peak_mem_bytes"):
            assert key in r
        assert r["action_hz"] > 0 and r["peak_mem_bytes"] > 0
        assert (r["tokens_per_s"] > 0) == (r["mode"] != "action_only")
    seq = next(r for r in records if r["mode"] == "sequential" and r["decode_len"] == 3)
    assert seq["speedup_action_vs_sequential"] == 1.0
    assert all(r["efficiency"] is not None for r in oxygen)
    assert (out / "action_hz.png").stat().st_size > 1000 and (out / "tokens_per_s.png").stat().st_size > 1000
    assert "action Hz" in proc.stdout and "oxygen" in proc.stdout
    assert parts["action_rtc_s"] > 0 and "A_rtc (real-time chunking" in proc.stdout  # RTC chunk cost, side by side


def test_decode_cost_interpolation_and_comparisons() -> None:
    parts = {"prefill_s": 0.2, "action_s": 0.1, "decode_s": {"1": 0.01, "10": 0.02, "30": 0.06}}
    assert interpolate_decode(parts, 1) == 0.01
    assert abs(interpolate_decode(parts, 20) - 0.04) < 1e-12
    assert abs(interpolate_decode(parts, 40) - 0.08) < 1e-12
    records = [
        {"mode": "sequential", "decode_len": 30, "tokens_per_frame": 30, "action_hz": 10.0, "tokens_per_s": 30.0,
         "frame_ms": 1000.0, "decode_batch": None},
        {"mode": "action_only", "decode_len": 0, "tokens_per_frame": 0, "action_hz": 40.0, "tokens_per_s": 0.0,
         "frame_ms": 250.0, "decode_batch": None},
        {"mode": "oxygen", "decode_len": 30, "tokens_per_frame": 1, "action_hz": 30.0, "tokens_per_s": 90.0,
         "frame_ms": 400.0, "decode_batch": 30},
    ]
    add_comparisons(records, parts)
    oxy = records[2]
    assert oxy["speedup_action_vs_sequential"] == 3.0 and oxy["speedup_tokens_vs_sequential"] == 3.0
    assert oxy["fraction_of_action_only"] == 0.75
    assert abs(oxy["efficiency"] - (0.2 + 0.1 + 0.06) / 0.4) < 1e-12


def test_robots_compares_one_engine_with_separate_processes(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "oxygen_ros.bench.cli", "--preset", "tiny", "--dtype", "float32", "--threads", "1",
           "--robots", "1,2", "--seconds", "1", "--repeats", "1", "--decode-len", "2", "--actions", "eager",
           "--prefill", "eager", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "fleet.json").read_text())
    for n in ("1", "2"):
        for way in ("fleet", "separate"):
            row = result["rows"][n][way][0]
            assert row["chunks_per_s"] > 0 and row["tokens_per_s"] > 0 and row["peak_mem_bytes"] > 0
    assert result["rows"]["2"]["separate"][0]["threads_each"] == 1
    assert set(result["parts"]) == {"P", "P1", "A", "D", "prefill"} and set(result["parts"]["A"]) == {"1", "2"}
    assert result["parts"]["prefill"] == "batched"  # the eager prefill: B frames in one call
    assert "fleet/separate chunks/s" in proc.stdout and "A(B)" in proc.stdout and "P1(B)" in proc.stdout
    assert result["command"].startswith("oxygen-bench ") and str(tmp_path) not in (tmp_path / "fleet.txt").read_text()


def test_startup_times_a_cold_and_a_warm_process(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "oxygen_ros.bench.cli", "--preset", "tiny", "--dtype", "float32", "--threads", "1",
           "--startup", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "startup.json").read_text())
    for start in ("cold", "warm"):
        r = result[start]
        assert r["first_chunk_s"] >= r["imports_s"] > 0 and r["tick_s"] > 0
    if compiler_available() is None:  # both compiled; the warm process loaded what the cold one compiled
        assert result["cold"]["fused"] and result["warm"]["fused"]
        assert result["cold"]["action_compile_s"] > 0 and result["warm"]["action_compile_s"] > 0
        assert result["cold"]["aot_compiled"] > 0 and result["cold"]["aot_loaded"] == 0
        assert result["warm"]["aot_loaded"] > 0 and result["warm"]["aot_compiled"] == 0
    assert "start-up to the first chunk" in proc.stdout and " cold |" in proc.stdout and " warm |" in proc.stdout


def _arithmetic_processes() -> list[str]:
    from oxygen_ros.bench.probes.lane_contention import ARITHMETIC_ONLY

    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if ARITHMETIC_ONLY in cmdline.read_bytes().decode(errors="replace"):
                found.append(cmdline.parent.name)
        except OSError:  # the process ended while we looked
            pass
    return found


def test_lane_contention_times_the_chunk_alone_and_beside_each_load() -> None:
    from oxygen_ros.model.network.packed_decode import can_pack

    packs = can_pack(torch.zeros(1, dtype=torch.bfloat16))  # bfloat16 on a CPU with oneDNN: both decode weights
    cmd = [sys.executable, "-m", "oxygen_ros.bench.probes.lane_contention", "--preset", "tiny",
           "--dtype", "bfloat16" if packs else "float32", "--actions", "eager", "--live", "3", "--rounds", "2",
           "--samples", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rounds = [line for line in proc.stdout.splitlines() if line.startswith("round ")]
    kinds = ["packed", "plain"] if packs else ["plain"]
    assert len(rounds) == 2 and all(f"A beside decode steps ({kind} weights)" in r and f"D(3) beside chunks ({kind})" in r
                                    and f"A with one D(3) ({kind})" in r for r in rounds for kind in kinds)
    assert "3 live requests" in proc.stdout and "of 3 requests were live" not in proc.stdout  # they outlast the rounds
    assert proc.stdout.count("oxygen could keep at most") == len(kinds)
    assert _arithmetic_processes() == []  # the load beside the chunk ends with its block


def test_packed_weights_compares_the_decode_products_bit_for_bit() -> None:
    cmd = [sys.executable, "-m", "oxygen_ros.bench.probes.packed_weights", "--preset", "tiny", "--dtype", "float32",
           "--rows", "1", "3", "--rounds", "1", "--repeats", "3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    products = [line.split() for line in proc.stdout.splitlines() if line.strip().startswith(("layer ", "text head"))]
    # 7 layer weights and the head, per row count; whether the bits agree depends on the CPU's kernels (in float32
    # the plain product is MKL's, the packed one oneDNN's), so the column is checked for a verdict, not a value
    assert len(products) == 2 * 8 and all(p[-1] in ("True", "False") for p in products)
    assert proc.stdout.count("one decode step's products") == 2 and "a packed copy of every decode weight" in proc.stdout


def test_dtype_parts_times_each_part_in_both_dtypes() -> None:
    cmd = [sys.executable, "-m", "oxygen_ros.bench.probes.dtype_parts", "--preset", "tiny", "--rows", "3",
           "--rounds", "1", "--repeats", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()
            if line.startswith(("prefill ", "chunk ", "D(3) "))}
    assert set(rows) == {"prefill", "chunk", "D(3)"}
    assert all(float(ms) > 0 for row in rows.values() for ms in row)  # float32 ms, bfloat16 ms, their ratio
    packed = "packs and multiplies" if onednn_packs_bfloat16() else "no bfloat16 path"
    assert packed in proc.stdout.splitlines()[1]
