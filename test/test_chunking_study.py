"""`oxygen-sim chunking` end to end on the tiny preset: every variant and latency runs the same episodes,
and the study writes its table, JSON and plot. No figure is asserted: they live in docs/rtc."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oxygen_ros.runtime import RuntimeConfig
from oxygen_ros.sim.chunking_study import VARIANTS, combine, markdown_table, run_study, write_outputs
from oxygen_ros.sim.evaluate import EvalSettings, eval_specs


def test_study_runs_every_variant_and_writes_its_outputs(tmp_path: Path) -> None:
    config = RuntimeConfig(model_preset="tiny", engine_mode="action_only", tasks=[], num_threads=1)
    lines: list[str] = []
    rows = run_study(config, EvalSettings(time_limit_s=1.0), eval_specs(4, 1), [0.0, 0.2], progress=lines.append)
    assert [(r["variant"], r["latency_s"]) for r in rows] == [(v.name, lat) for v in VARIANTS for lat in (0.0, 0.2)]
    assert len(lines) == len(rows)
    for r in rows:
        assert r["episodes"] == 1 and r["chunks"] == 5 and r["mean_switch_jump_rad"] is not None
    by = {(r["variant"], r["latency_s"]): r for r in rows}
    # Without latency, stamping changes nothing: the same chunks, the same motion.
    assert by[("naive", 0.0)]["mean_jerk_rms"] == by[("aligned", 0.0)]["mean_jerk_rms"]
    assert by[("naive", 0.2)]["mean_jerk_rms"] != by[("aligned", 0.2)]["mean_jerk_rms"]
    assert by[("aligned+rtc", 0.2)]["mean_switch_jump_rad"] != by[("aligned", 0.2)]["mean_switch_jump_rad"]
    write_outputs(rows, tmp_path, {"episodes": 1, "model": "preset tiny"})
    assert json.loads((tmp_path / "results.json").read_text())["rows"] == rows
    table = (tmp_path / "table.md").read_text()
    assert table == markdown_table(rows) and table.count("\n") == 2 + len(rows)
    assert (tmp_path / "chunking.png").stat().st_size > 5000


def test_runs_of_single_variants_combine_into_one_table(tmp_path: Path) -> None:
    def row(variant: str, latency: float) -> dict:
        return {"variant": variant, "latency_s": latency, "episodes": 2, "success_rate": 0.5, "mean_time_to_success_s": 3.0,
                "mean_switch_jump_rad": 0.1, "p95_switch_jump_rad": 0.2, "mean_jerk_rms": 10.0, "chunks": 4, "not_sent": 0}

    meta = {"episodes": 2, "model": "m"}
    write_outputs([row("aligned+rtc", 0.1), row("aligned+rtc", 0.0)], tmp_path / "rtc", meta)
    write_outputs([row("naive", 0.0)], tmp_path / "naive", meta)
    rows, combined_meta = combine([tmp_path / "rtc", tmp_path / "naive"])
    assert [(r["variant"], r["latency_s"]) for r in rows] == [("naive", 0.0), ("aligned+rtc", 0.0), ("aligned+rtc", 0.1)]
    assert combined_meta == meta
    write_outputs([row("aligned", 0.0)], tmp_path / "other", {"episodes": 3, "model": "m"})
    with pytest.raises(ValueError, match="differ"):
        combine([tmp_path / "rtc", tmp_path / "other"])
