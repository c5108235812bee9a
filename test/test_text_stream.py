"""Text streaming: UTF-8 deltas across word pieces and byte tokens, stop strings that never leak."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_fixtures import make_frame, tiny_model
from oxygen_ros.engine import Engine, TextTask
from oxygen_ros.engine.text_stream import TextStream
from oxygen_ros.model.tokenizers.tokenizer import Tokenizer, train_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    return train_tokenizer(tmp_path_factory.mktemp("tok") / "t.model", 512)


def stream_all(stream: TextStream, ids: list[int]) -> tuple[list[str], str]:
    deltas = [stream.push(i) for i in ids]
    return deltas, "".join(deltas) + stream.finish()


def test_deltas_join_to_the_decoded_text_with_multibyte_characters(tokenizer: Tokenizer) -> None:
    text = " place the cup on the café table, 日本 🤖 done"
    ids = tokenizer.encode(text)
    assert any(tokenizer.is_byte(i) for i in ids), "the test needs byte-fallback tokens"
    deltas, joined = stream_all(TextStream(tokenizer), ids)
    assert joined == text
    assert all("\ufffd" not in d for d in deltas)  # never half a character mid-stream


def test_stop_string_ends_the_stream_and_is_never_emitted(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode(" grasp the cup. then lift it")
    stream = TextStream(tokenizer, stop=[". then"])
    out = []
    for i in ids:
        out.append(stream.push(i))
        if stream.stopped:
            break
    assert stream.stopped
    assert "".join(out) == " grasp the cup"
    assert all(". then" not in d and not d.endswith(".") for d in out)


def test_text_held_back_for_a_possible_stop_is_released_when_it_is_not_one(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode(" open the door. close it")
    deltas, joined = stream_all(TextStream(tokenizer, stop=[". stop"]), ids)
    assert joined == " open the door. close it"


def test_engine_streams_text_that_equals_the_tokens(tokenizer: Tokenizer) -> None:
    model = tiny_model(seed=9)
    engine = Engine(model, [TextTask("language", tuple(tokenizer.encode(" Subtask:")), 1, 15)], tokenizer, kv_budget_bytes=8 << 20)
    engine.tick(make_frame(model.config, 0))
    events = engine.drain()
    assert events[-1].final and events[-1].finish_reason in ("eos", "max_tokens")
    ids = [t for e in events for t in e.token_ids if t != model.config.eos_token_id]
    expected = b"".join(tokenizer.piece_bytes(i) for i in ids).decode("utf-8", errors="replace")
    assert "".join(e.text for e in events) == expected
    assert [e.seq for e in events] == list(range(len(events)))


def test_stream_without_tokenizer_carries_only_ids() -> None:
    stream = TextStream(None)
    assert stream.push(5) == "" and stream.finish() == ""
