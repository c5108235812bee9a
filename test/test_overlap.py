"""Lanes: a decode step overlapped with the action chunk on threads of their own. Each request's greedy text,
the action chunks and the tokens per frame are what they are without overlap."""

from __future__ import annotations

import threading

import torch

from engine_fixtures import decode_alone, make_frame, tiny_model
from oxygen_ros.engine import Engine, TextTask, make_runner
from oxygen_ros.engine.engine import EngineLanes
from oxygen_ros.engine.lanes import Lane

LANGUAGE = TextTask("language", continuation=(11, 12, 13), every_n_frames=1, max_tokens=6)
MEMORY = TextTask("memory", continuation=(21, 22), every_n_frames=2, max_tokens=9)


def run_oxygen(engine: Engine, frames, k: int = 1):  # noqa: ANN001, ANN201
    runner = make_runner("oxygen", engine, tokens_per_frame=k)
    reports = [runner.frame(f, torch.full((10, 8), 0.1 * f.frame_seq)) for f in frames]
    tail = engine.drain()
    return reports, tail


def test_overlapped_decode_gives_each_request_its_own_greedy_text_and_same_actions() -> None:
    model = tiny_model(seed=6)
    frames = [make_frame(model.config, i) for i in range(8)]
    lanes = EngineLanes("cpu")
    try:
        overlapped = Engine(model, [LANGUAGE, MEMORY], kv_budget_bytes=8 << 20, ignore_eos=True, lanes=lanes)
        reports, tail = run_oxygen(overlapped, frames)
    finally:
        lanes.close()
    plain = Engine(model, [LANGUAGE, MEMORY], kv_budget_bytes=8 << 20, ignore_eos=True)
    plain_reports, plain_tail = run_oxygen(plain, frames)

    tokens: dict[tuple[int, str], list[int]] = {}
    origin = {}
    for report, frame in zip(reports, frames):
        for rid, task in report.tick.started:
            origin[rid] = (frame, task)
        for e in report.events:
            tokens.setdefault(e.request_id, []).extend(e.token_ids)
    for e in tail:
        tokens.setdefault(e.request_id, []).extend(e.token_ids)
    specs = {t.name: t for t in (LANGUAGE, MEMORY)}
    for rid, (frame, task) in origin.items():
        expected = decode_alone(model, frame, list(specs[task].continuation), specs[task].max_tokens)
        assert tokens[rid] == expected, (rid, task)
    # The decode step really ran inside the tick (during the action chunk) from the second frame on,
    # and with k = 1 it was the only one: one token per live request per frame, as without overlap.
    assert not reports[0].tick.events and all(r.tick.events for r in reports[1:])
    assert all(r.events == r.tick.events for r in reports[1:])
    assert [r.tokens for r in reports[1:]] == [len({e.request_id for e in r.events}) for r in reports[1:]]
    for got, ref in zip(reports, plain_reports):
        torch.testing.assert_close(torch.from_numpy(got.tick.actions), torch.from_numpy(ref.tick.actions),
                                   rtol=1e-5, atol=1e-6)
    assert overlapped.kv.stats().used_bytes == 0 and plain.kv.stats().used_bytes == 0


def test_lane_runs_on_its_own_thread_with_its_own_thread_count() -> None:
    before = torch.get_num_threads()
    lane = Lane("probe", threads=1)
    try:
        name, threads = lane.run(lambda: (threading.current_thread().name, torch.get_num_threads()))
        assert name.startswith("oxygen-probe") and threads == 1
        try:
            lane.run(lambda: 1 / 0)
        except ZeroDivisionError:
            pass
        else:
            raise AssertionError("a lane's exception must reach the caller")
    finally:
        lane.close()
    assert threading.current_thread() is threading.main_thread() and torch.get_num_threads() == before
