"""Questions asked while acting (ROS-free engine API): forked from the NEXT frame's shared prefix after the
action chunk, decoded in the same batched steps as the scheduled tasks, equal to decoding alone, cancellable
at every stage with their KV freed, and refused with a reason when the queue or the KV budget says no."""

from __future__ import annotations

import pytest
import torch

from engine_fixtures import decode_alone, make_frame, tiny_model
from oxygen_ros.engine import ASK_TASK, Engine, QuestionRefused, TextTask, make_runner

LANGUAGE = TextTask("language", continuation=(11, 12, 13), every_n_frames=1, max_tokens=6)
QUESTION = [31, 32, 33, 34]


def _tokens(events, rid):
    return [t for e in events if e.request_id == rid for t in e.token_ids]


def test_question_forks_from_the_next_frame_and_decodes_batched_with_tasks():
    model = tiny_model(seed=3)
    engine = Engine(model, [LANGUAGE], kv_budget_bytes=8 << 20, ignore_eos=True)
    runner = make_runner("oxygen", engine, tokens_per_frame=1)
    frames = [make_frame(model.config, i) for i in range(12)]
    runner.frame(frames[0])
    rid = engine.ask(QUESTION, max_tokens=5)
    assert engine.kv.get(rid) is None and len(engine.questions) == 1  # nothing forked before the next frame
    noise = engine.sample_noise()
    report = runner.frame(frames[1], noise=noise.clone())
    assert (rid, ASK_TASK) in report.tick.started and len(engine.questions) == 0
    request = engine.kv.get(rid)
    assert request.frame_seq == 1 and request.frame_stamp_ns == frames[1].stamp_ns
    assert request.prefix.refcount >= 2  # shared with the frame's language request: one prefill
    # The question does not change the frame's action chunk (it forks after the action).
    solo = Engine(tiny_model(seed=3), [LANGUAGE], kv_budget_bytes=8 << 20, ignore_eos=True)
    solo.tick(frames[0])
    assert torch.equal(torch.as_tensor(solo.tick(frames[1], noise=noise.clone()).actions), torch.as_tensor(report.tick.actions))
    events = list(report.events)
    batches = []
    for frame in frames[2:]:
        events += runner.frame(frame).events
        batches.append(engine.stats().last_decode_batch)
    assert max(batches) >= 3  # the question advanced in the same call as several language requests
    final = [e for e in events if e.request_id == rid and e.final]
    assert len(final) == 1 and final[0].finish_reason == "max_tokens" and final[0].task == ASK_TASK
    assert final[0].frame_seq == 1 and final[0].frame_stamp_ns == frames[1].stamp_ns
    assert _tokens(events, rid) == decode_alone(model, frames[1], QUESTION, 5)


@pytest.mark.parametrize("stage", ["pending", "running", "waiting"])
def test_cancel_frees_the_question_at_every_stage(stage):
    model = tiny_model(seed=4)
    budget = 8 << 20 if stage != "waiting" else None
    if budget is None:  # a pool that holds one frame prefix + the scratch, so the question must wait
        per_token = 2 * model.config.backbone.depth * model.config.backbone.num_kv_heads * model.config.backbone.head_dim * 4
        budget = per_token * (model.config.max_prefix_tokens + 100)  # the arena holds one prefix + one question
    engine = Engine(model, [], kv_budget_bytes=budget, ignore_eos=True, admission="wait")
    engine.tick(make_frame(model.config, 0))  # the refusal preview then knows the real prefix size
    if stage == "waiting":
        engine.ask(QUESTION, max_tokens=40)  # occupies the arena
        engine.tick(make_frame(model.config, 1))
    rid = engine.ask(QUESTION, max_tokens=40)
    if stage != "pending":
        tick = engine.tick(make_frame(model.config, 2))
        assert (rid, ASK_TASK) in (tick.started if stage == "running" else tick.waiting)
        engine.decode_step()
    used = engine.kv.stats().used_bytes
    event = engine.cancel(rid)
    assert event is not None and event.final and event.finish_reason == "cancelled" and event.request_id == rid
    assert engine.cancel(rid) is None  # a second cancel finds nothing
    assert engine.kv.get(rid) is None and rid not in engine.kv.waiting_ids() and len(engine.questions) == 0
    if stage == "running":
        assert engine.kv.stats().used_bytes < used
    engine.cancel_all()
    assert engine.kv.stats().used_bytes == 0 and engine.kv.stats().live_prefixes == 0


def test_refusals_say_why_and_the_engine_keeps_working():
    model = tiny_model(seed=5)
    engine = Engine(model, [LANGUAGE], kv_budget_bytes=1 << 20, ignore_eos=True, max_questions=2, admission="refuse")
    with pytest.raises(QuestionRefused, match="too large"):
        engine.ask(QUESTION, max_tokens=10**6)
    with pytest.raises(QuestionRefused, match="at least one prompt token"):
        engine.ask([], max_tokens=4)
    first = engine.ask(QUESTION, max_tokens=4)
    engine.ask(QUESTION, max_tokens=4)
    assert "queue full" in engine.question_refusal(len(QUESTION), 4)
    with pytest.raises(QuestionRefused, match="queue full"):
        engine.ask(QUESTION, max_tokens=4)
    tick = engine.tick(make_frame(model.config, 0))
    assert (first, ASK_TASK) in tick.started
    # Fill the arena with long questions until the KV budget refuses (admission 'refuse').
    reasons = []
    for i in range(50):
        try:
            engine.ask(QUESTION, max_tokens=200)
        except QuestionRefused as exc:
            reasons.append(str(exc))
            break
        tick = engine.tick(make_frame(model.config, i + 1))
        reasons += [r for _, task, r in tick.refused if task == ASK_TASK]
        if reasons:
            break
    assert reasons and any(r.startswith("no KV memory") or r == "no_kv_memory" for r in reasons), reasons
    events = engine.cancel_all()
    assert all(e.final and e.finish_reason == "cancelled" for e in events)
    assert engine.kv.stats().used_bytes == 0
    assert engine.tick(make_frame(model.config, 99)).actions is not None


def test_cancel_all_ends_pending_questions_too():
    model = tiny_model(seed=6)
    engine = Engine(model, [], kv_budget_bytes=8 << 20)
    rid = engine.ask(QUESTION, max_tokens=3, stop=("x",))
    events = engine.cancel_all()
    assert [(e.request_id, e.task, e.finish_reason) for e in events] == [(rid, ASK_TASK, "cancelled")]
    assert len(engine.questions) == 0
