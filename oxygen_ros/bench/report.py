"""Derived figures, the printed table, results.json and the plots."""

from __future__ import annotations

import json
from pathlib import Path


def interpolate_decode(parts: dict, batch: float) -> float:
    """D(B) from the measured points, linear in between (a decode step's cost is near-linear in B)."""
    points = sorted((int(b), s) for b, s in parts["decode_s"].items())
    if batch <= points[0][0]:
        return points[0][1]
    for (b0, s0), (b1, s1) in zip(points, points[1:]):
        if batch <= b1:
            return s0 + (s1 - s0) * (batch - b0) / (b1 - b0)
    (b0, s0), (b1, s1) = points[-2], points[-1]
    return s1 + (s1 - s0) * (batch - b1) / (b1 - b0)


def add_comparisons(records: list[dict], parts: dict) -> None:
    """Speedups over ``sequential`` at the same N, share of the action-only rate, oxygen's efficiency."""
    seq = {r["decode_len"]: r for r in records if r["mode"] == "sequential"}
    ceiling = next((r["action_hz"] for r in records if r["mode"] == "action_only"), None)
    for r in records:
        base = seq.get(r["decode_len"])
        r["speedup_action_vs_sequential"] = r["action_hz"] / base["action_hz"] if base else None
        r["speedup_tokens_vs_sequential"] = (
            r["tokens_per_s"] / base["tokens_per_s"] if base and base["tokens_per_s"] else None
        )
        r["fraction_of_action_only"] = r["action_hz"] / ceiling if ceiling else None
        r["efficiency"] = None
        if r["mode"] == "oxygen" and r["decode_batch"]:
            k = r["tokens_per_frame"]
            ideal = parts["prefill_s"] + parts["action_s"] + k * interpolate_decode(parts, r["decode_batch"])
            r["efficiency"] = ideal / (r["frame_ms"] / 1e3)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_before(before: list[dict], records: list[dict], what: str = "eager action chunk and prefill, no lanes") -> list[str]:
    """Lines comparing points of a baseline engine (``what``) with this run's engine, timed in the same rounds."""
    after = {(r["mode"], r["decode_len"], r["tokens_per_frame"]): r for r in records}
    ceiling = {v: next((r["frame_ms"] for r in rs if r["mode"] == "action_only"), None)
               for v, rs in (("before", before), ("after", records))}
    lines = ["", f"before/after (same run, interleaved): before = {what}",
             f"{'mode':<12}{'N':>4}{'k':>4}{'before ms':>11}{'after ms':>10}{'after/before':>14}"
             f"{'before /act-only':>18}{'after /act-only':>17}"]
    for b in before:
        a = after.get((b["mode"], b["decode_len"], b["tokens_per_frame"]))
        if a is None or not ceiling["before"] or not ceiling["after"]:
            continue
        k = str(b["tokens_per_frame"]) if b["mode"] == "oxygen" else "-"
        lines.append(f"{b['mode']:<12}{b['decode_len']:>4}{k:>4}{b['frame_ms']:>11.1f}{a['frame_ms']:>10.1f}"
                     f"{a['frame_ms'] / b['frame_ms']:>14.2f}"
                     f"{ceiling['before'] / b['frame_ms']:>18.0%}{ceiling['after'] / a['frame_ms']:>17.0%}")
    return lines


def fused_line(part: str, fused_s: float, eager_s: float, path: str, compile_s: float | None) -> str:
    """'<part>: fused … ms vs eager … ms = …% of eager, compiled at start-up in … s'."""
    how = {"compiled": "fused (torch.compile)", "cuda_graph": "CUDA graph",
           "cuda_graph_compiled": "CUDA graph of the compiled network"}.get(path, "eager")
    compiled = f", compiled at start-up in {compile_s:.1f} s" if compile_s else ""
    return f"{part}: {how} {fused_s * 1e3:.1f} ms vs eager {eager_s * 1e3:.1f} ms = {fused_s / eager_s:.0%} of eager{compiled}"


def frame_shares(records: list[dict], parts: dict) -> list[str]:
    """Each part's time as a share of the action-only frame and of oxygen's frame at its largest N, smallest k
    (with lanes, a decode step overlaps the action chunk, so shares may add up to more than the frame)."""
    lines = []
    oxygen = [r for r in records if r["mode"] == "oxygen"]
    picks = [r for r in records if r["mode"] == "action_only"]
    if oxygen:
        picks.append(min(oxygen, key=lambda r: (-r["decode_len"], r["tokens_per_frame"])))
    for r in picks:
        frame = r["frame_ms"] / 1e3
        shares = [f"P {parts['prefill_s'] / frame:.0%}", f"A {parts['action_s'] / frame:.0%}"]
        if r["mode"] == "oxygen" and r["decode_batch"]:
            d = r["tokens_per_frame"] * interpolate_decode(parts, r["decode_batch"])
            shares.append(f"{r['tokens_per_frame']}xD({r['decode_batch']:.0f}) {d / frame:.0%}")
        label = r["mode"] + (f" N={r['decode_len']} k={r['tokens_per_frame']}" if r["mode"] == "oxygen" else "")
        lines.append(f"share of the {label} frame ({r['frame_ms']:.1f} ms): " + ", ".join(shares))
    return lines


def format_table(records: list[dict], parts: dict, header: str, before: list[dict] | None = None,
                 eager_prefill: list[dict] | None = None) -> str:
    lines = [header, ""]
    d = parts["decode_s"]
    lines.append(
        f"parts: P (prefill, {parts['prefix_tokens']} positions) = {parts['prefill_s'] * 1e3:.1f} ms   "
        f"A (action chunk) = {parts['action_s'] * 1e3:.1f} ms   "
        + (f"A_rtc (real-time chunking) = {parts['action_rtc_s'] * 1e3:.1f} ms ({parts['action_rtc_s'] / parts['action_s']:.2f}x A)   "
           if "action_rtc_s" in parts else "")
        + "   ".join(f"D({b}) = {s * 1e3:.1f} ms" for b, s in sorted(d.items(), key=lambda kv: int(kv[0])))
    )
    if "action_eager_s" in parts:
        lines.append(fused_line("action chunk", parts["action_s"], parts["action_eager_s"], parts.get("action_path", ""),
                                parts.get("compile_s")))
    if "action_rtc_eager_s" in parts:
        lines.append(fused_line("real-time chunking", parts["action_rtc_s"], parts["action_rtc_eager_s"],
                                parts.get("action_path", "") if parts.get("rtc_compile_s") else "eager",
                                parts.get("rtc_compile_s")))
    if "prefill_eager_s" in parts:
        lines.append(fused_line("prefill", parts["prefill_s"], parts["prefill_eager_s"],
                                "compiled" if parts.get("prefill_fused") else "eager", parts.get("prefill_compile_s")))
    if "prefill_matmul_s" in parts:
        lines.append(f"prefill floor: P {parts['prefill_s'] * 1e3:.1f} ms = {parts['prefill_s'] / parts['prefill_matmul_s']:.2f}x "
                     f"its {parts['prefill_matmuls']} matrix products alone ({parts['prefill_matmul_s'] * 1e3:.1f} ms, "
                     f"{parts['prefill_matmul_gflop']:.1f} GFLOP, same shapes and dtype, same rounds)"
                     + (f"; {parts['prefill_s'] / (parts['prefill_matmul_s'] + parts['prefill_attention_matmul_s']):.2f}x "
                        f"those and its attention's {parts['prefill_attention_matmuls']} score and value products "
                        f"({parts['prefill_attention_matmul_s'] * 1e3:.1f} ms, {parts['prefill_attention_matmul_gflop']:.1f} GFLOP)"
                        if parts.get("prefill_attention_matmuls") else ""))
    if "action_rtc_matmul_s" in parts:
        lines.append(f"real-time chunking floor: A_rtc = {parts['action_rtc_s'] / parts['action_s']:.2f}x A; their matrix "
                     f"products alone {parts['action_rtc_matmul_s'] / parts['action_matmul_s']:.2f}x "
                     f"({parts['action_rtc_matmul_s'] * 1e3:.1f} against {parts['action_matmul_s'] * 1e3:.1f} ms: the "
                     f"guided chunk's forward and input-gradient products against the plain chunk's, same rounds"
                     + (f"; {parts['action_rtc_matmul_gflop']:.2f} against {parts['action_matmul_gflop']:.2f} GFLOP"
                        if "action_matmul_gflop" in parts else "") + ")")
    if "decode_matmul_s" in parts:
        b = parts["decode_matmul_batch"]
        d_b = d[str(b)]
        packed = parts.get("decode_matmuls_packed", 0)
        weights = f"{packed} of them with weights packed for oneDNN, as the step runs them" if packed else "plain weights"
        lines.append(f"decode floor: D({b}) {d_b * 1e3:.1f} ms = {d_b / parts['decode_matmul_s']:.2f}x its "
                     f"{parts['decode_matmuls']} matrix products alone ({weights}; {parts['decode_matmul_s'] * 1e3:.1f} ms, same rounds); "
                     f"the text head's ({b} rows of logits over the vocabulary) {parts['decode_head_matmul_s'] * 1e3:.1f} ms of them")
    lines.append("")
    cols = f"{'mode':<12}{'N':>4}{'k':>4}{'frame ms':>10}{'action Hz':>11}{'tok/s':>9}{'peak MB':>9}"
    cols += f"{'xseq act':>10}{'xseq tok':>10}{'/act-only':>10}{'eff':>6}"
    lines += [cols, "-" * len(cols)]
    order = {"action_only": 0, "sequential": 1, "parallel": 2, "shared": 3, "oxygen": 4}
    for r in sorted(records, key=lambda r: (r["decode_len"], order[r["mode"]], r["tokens_per_frame"])):
        k = r["tokens_per_frame"] if r["mode"] == "oxygen" else None
        lines.append(
            f"{r['mode']:<12}{r['decode_len']:>4}{_fmt(k, 'd'):>4}{r['frame_ms']:>10.1f}{r['action_hz']:>11.2f}"
            f"{r['tokens_per_s']:>9.1f}{r['peak_mem_bytes'] / 2**20:>9.0f}"
            f"{_fmt(r['speedup_action_vs_sequential'], '.2f'):>10}{_fmt(r['speedup_tokens_vs_sequential'], '.2f'):>10}"
            f"{_fmt(r['fraction_of_action_only'], '.0%'):>10}{_fmt(r['efficiency'], '.2f'):>6}"
        )
    lines.append("")
    lines.append("xseq: ratio to sequential at the same N; /act-only: action Hz as a share of action_only; "
                 "eff: (P + A + k*D(B)) / frame time for oxygen, B = its measured live batch.")
    lines += frame_shares(records, parts)
    if before:
        lines += format_before(before, records)
    if eager_prefill:
        lines += format_before(eager_prefill, records, "eager prefill, all else this run's engine")
    return "\n".join(lines)


def write_outputs(out_dir: Path, records: list[dict], parts: dict, meta: dict, before: list[dict] | None = None,
                  eager_prefill: list[dict] | None = None) -> list[Path]:
    """results.json: the run (command, machine, workload), the parts, every point's record, the before points."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.json"
    results.write_text(json.dumps({"run": meta, "parts": parts, "records": records, "before": before or [],
                                   "eager_prefill": eager_prefill or []}, indent=2))
    table = out_dir / "table.txt"
    table.write_text(format_table(records, parts, meta["header"], before, eager_prefill) + "\n")
    return [results, table, *plot(out_dir, records)]


def plot(out_dir: Path, records: list[dict]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for metric, label, name in (("action_hz", "action rate (Hz)", "action_hz.png"), ("tokens_per_s", "text throughput (tokens/s)", "tokens_per_s.png")):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        series: dict[str, list[tuple[int, float]]] = {}
        for r in records:
            key = f"oxygen k={r['tokens_per_frame']}" if r["mode"] == "oxygen" else r["mode"]
            series.setdefault(key, []).append((r["decode_len"], r[metric]))
        lens = sorted({r["decode_len"] for r in records if r["mode"] != "action_only"})
        for key, points in sorted(series.items()):
            if key == "action_only":
                if metric == "action_hz" and lens:
                    ax.hlines(points[0][1], lens[0], lens[-1], linestyles="dashed", colors="grey", label="action_only")
                continue
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=key)
        ax.set_xlabel("decode length N (tokens per request)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
