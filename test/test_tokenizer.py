"""Tokenizer, streaming decoder and prompt formats, on a SentencePiece model trained here."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from oxygen_ros.model.network.config import PI05, TINY
from oxygen_ros.model.tokenizers.prompt import (
    PromptError,
    PromptTooLongError,
    build_prompt_tokens,
    clean_task_text,
    continuation_tokens,
    discretize_state,
)
from oxygen_ros.model.tokenizers.tokenizer import IncrementalDecoder, Tokenizer, TokenizerError, robot_corpus, train_tokenizer

MULTIBYTE = "Put the café cup near 日本 🤖 box"


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tiny.model"
    train_tokenizer(path, vocab_size=512)
    return path


@pytest.fixture(scope="module")
def tok(model_path: Path) -> Tokenizer:
    return Tokenizer.from_file(model_path)


# ---- tokenizer --------------------------------------------------------------------------------------------


def test_paligemma_special_id_layout(tok: Tokenizer) -> None:
    assert (tok.pad_id, tok.eos_id, tok.bos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.vocab_size == 512
    tok.check_compatible(TINY.vocab_size, TINY.bos_token_id, TINY.eos_token_id, TINY.pad_token_id)
    tok.check_compatible(PI05.vocab_size, PI05.bos_token_id, PI05.eos_token_id, PI05.pad_token_id)
    with pytest.raises(TokenizerError, match="vocab_size 100"):
        tok.check_compatible(100, 2, 1, 0)
    with pytest.raises(TokenizerError, match="bos id 2 != model bos_token_id 5"):
        tok.check_compatible(512, 5, 1, 0)


def test_encode_decode_roundtrip_with_byte_fallback(tok: Tokenizer) -> None:
    ids = tok.encode(MULTIBYTE, add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
    # The corpus is ASCII, so the multi-byte characters must have gone through byte pieces.
    byte_pieces = [tok.id_to_piece(i) for i in ids if tok.is_byte(i)]
    assert "<0xC3>" in byte_pieces and "<0xA9>" in byte_pieces  # é
    assert "<0xF0>" in byte_pieces  # first byte of the emoji
    assert tok.decode(ids) == MULTIBYTE  # control tokens decode to nothing
    assert tok.decode(tok.encode(" leading and  double spaces\n")) == " leading and  double spaces\n"


def test_bpe_dropout_segments_one_text_many_ways_and_leaves_the_tokenizer_alone(tok: Tokenizer) -> None:
    text = "Task: pick up the red block and put it on the blue plate, State: 12 200;"
    canonical = tok.encode(text)
    sampled = [tok.sampling(0.3, seed=7).encode(text) for _ in range(2)]
    assert sampled[0] == sampled[1]  # one seed, one sequence of segmentations
    many = tok.sampling(0.3, seed=7)
    segmentations = {tuple(many.encode(text)) for _ in range(20)}
    assert len(segmentations) > 3 and all(tok.decode(list(ids)) == text for ids in segmentations)
    assert min(len(ids) for ids in segmentations) >= len(canonical)  # smaller pieces, never bigger ones
    assert tok.encode(text) == canonical  # the served tokenizer keeps its one segmentation
    with pytest.raises(ValueError, match="dropout"):
        tok.sampling(1.0, seed=0)


def test_an_uncased_tokenizer_reads_capitals_as_lower_case_and_writes_the_same_file_twice(tmp_path: Path) -> None:
    folded = train_tokenizer(tmp_path / "a.model", vocab_size=512, fold_case=True)
    train_tokenizer(tmp_path / "b.model", vocab_size=512, fold_case=True)
    assert (tmp_path / "a.model").read_bytes() == (tmp_path / "b.model").read_bytes()
    text = "Task: pick up the red block, State: 12 200;\nAction: "
    for typed in (text.upper(), text.title(), text):
        assert folded.encode(typed) == folded.encode(text)
    assert folded.decode(folded.encode("PICK the Café CUP 🤖")) == "pick the café cup 🤖"  # ASCII only is folded
    cased = Tokenizer.from_file(tmp_path / "a.model")  # the rule travels inside the model file
    assert cased.encode("RED") == folded.encode("red")
    plain = train_tokenizer(tmp_path / "c.model", vocab_size=512)
    assert plain.encode("RED") != plain.encode("red") and plain.decode(plain.encode("RED")) == "RED"


def test_digits_are_split(tok: Tokenizer) -> None:
    pieces = [tok.id_to_piece(i) for i in tok.encode("255")]
    assert pieces == ["2", "5", "5"]


def test_decode_rejects_out_of_range_id(tok: Tokenizer) -> None:
    with pytest.raises(TokenizerError, match="token id 512 is outside the vocabulary"):
        tok.decode([5, 512])


def test_missing_and_corrupt_files(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="not found.*nope.model"):
        Tokenizer.from_file(tmp_path / "nope.model")
    empty = tmp_path / "empty.model"
    empty.write_bytes(b"")
    with pytest.raises(TokenizerError, match="empty"):
        Tokenizer.from_file(empty)
    corrupt = tmp_path / "corrupt.model"
    corrupt.write_bytes(b"\xff\x00 this is not a protobuf \x13\x37" * 10)
    with pytest.raises(TokenizerError, match="not a valid SentencePiece model"):
        Tokenizer.from_file(corrupt)


def test_training_is_deterministic(tmp_path: Path, model_path: Path) -> None:
    again = tmp_path / "again.model"
    train_tokenizer(again, vocab_size=512)
    assert again.read_bytes() == model_path.read_bytes()
    other = tmp_path / "other.model"
    train_tokenizer(other, vocab_size=512, corpus=robot_corpus(num_sentences=300, seed=1))
    assert other.read_bytes() != model_path.read_bytes()
    assert robot_corpus() == robot_corpus()


def test_training_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="smaller than required_chars"):
        train_tokenizer(tmp_path / "small.model", vocab_size=100)
    with pytest.raises(TokenizerError, match="empty corpus"):
        train_tokenizer(tmp_path / "none.model", vocab_size=512, corpus=[])
    assert not (tmp_path / "small.model").exists()


# ---- incremental decoding ---------------------------------------------------------------------------------


def test_incremental_decoder_one_token_at_a_time(tok: Tokenizer) -> None:
    text = "Subtask: grasp the café mug, then 日本 🤖 done"
    ids = tok.encode(text) + [tok.eos_id]
    dec = IncrementalDecoder(tok)
    deltas = [dec.push(i) for i in ids]
    deltas.append(dec.flush())
    assert "".join(deltas) == tok.decode(ids) == text
    assert all("\ufffd" not in d for d in deltas)
    # Byte tokens of an unfinished character produce empty deltas; each character arrives whole.
    assert "" in deltas[:-1]
    assert "🤖" in deltas and "日" in deltas and "本" in deltas
    # Word pieces keep their leading space ('▁').
    assert any(d.startswith(" ") and d.strip() for d in deltas)
    assert dec.text == text and dec.num_tokens == len(ids)


def test_incremental_decoder_with_growing_list(tok: Tokenizer) -> None:
    ids = tok.encode(" leading space and émoji 🤖")
    dec = IncrementalDecoder(tok)
    out = "".join(dec.update(ids[:n]) for n in range(0, len(ids) + 1, 3)) + dec.update(ids) + dec.flush()
    assert out == tok.decode(ids) == " leading space and émoji 🤖"
    fresh = IncrementalDecoder(tok)
    fresh.update(ids[:3])
    with pytest.raises(TokenizerError, match="shrank from 3 to 1"):
        fresh.update(ids[:1])


def test_incremental_decoder_flushes_incomplete_character(tok: Tokenizer) -> None:
    emoji_bytes = [tok.encode("🤖")[k] for k in range(2)]  # first two of its four byte pieces
    assert all(tok.is_byte(i) for i in emoji_bytes)
    dec = IncrementalDecoder(tok)
    assert dec.push(emoji_bytes) == ""
    assert dec.flush() == "\ufffd"
    with pytest.raises(TokenizerError, match="after flush"):
        dec.push(5)


def test_incremental_decoder_leading_space_option(tok: Tokenizer) -> None:
    ids = tok.encode(" pick")
    assert IncrementalDecoder(tok).push(ids) == " pick"  # Gemma-style models keep the space
    stripped = IncrementalDecoder(tok, strip_leading_space=True)
    assert stripped.push(ids) + stripped.flush() == "pick"


# ---- prompts ----------------------------------------------------------------------------------------------


def expected_bins(values: list[float]) -> list[int]:
    """256 equal bins over [-1, 1], computed without np.digitize. As in openpi and LeRobot (no clipping), a value
    below -1 is bin -1 and a value at or above 1 is the last bin."""
    return [-1 if v < -1.0 else min(255, math.floor((v + 1.0) * 128.0)) for v in values]


def test_discretize_state_matches_independent_binning() -> None:
    values = [-1.0, -0.3, -0.0039, 0.0, 0.5, 0.99, 1.0, -1.5, 2.0]
    got = discretize_state(np.array(values)).tolist()
    assert got == expected_bins(values) == [0, 89, 127, 128, 192, 254, 255, -1, 255]
    rng = np.random.default_rng(0)
    many = rng.uniform(-1, 1, size=200)
    assert discretize_state(many).tolist() == expected_bins(many.tolist())
    with pytest.raises(PromptError, match=r"non-finite values at indices \[1\]"):
        discretize_state([0.0, float("nan")])


def test_task_text_cleaning_as_openpi() -> None:
    assert clean_task_text("  Pick_up the\nRed cup \n") == "Pick up the Red cup"


def test_pi05_state_prompt(tok: Tokenizer) -> None:
    p = build_prompt_tokens(tok, " pick_up the cup\n", state=[-1.0, 0.0, 0.5, 1.0], fmt="pi05_state")
    assert p.text == "Task: pick up the cup, State: 0 128 192 255;\nAction: "
    assert p.ids[0] == tok.bos_id and p.ids[1:] == tok.encode(p.text)
    assert tok.decode(p.ids) == p.text and not p.truncated and len(p) == len(p.ids)


def test_pi05_prompt_without_state_encodes_newline_separately(tok: Tokenizer) -> None:
    p = build_prompt_tokens(tok, "open_the drawer", fmt="pi05")
    assert p.ids == [tok.bos_id] + tok.encode("open the drawer") + tok.encode("\n")
    assert tok.decode(p.ids) == "open the drawer\n"


def test_oxygen_prompt(tok: Tokenizer) -> None:
    p = build_prompt_tokens(tok, "clean the table", fmt="oxygen")
    assert p.text == "Task: clean the table. Subtask: "
    assert p.ids == [tok.bos_id] + tok.encode(p.text)


def test_prompt_format_errors(tok: Tokenizer) -> None:
    with pytest.raises(PromptError, match="needs the normalized state"):
        build_prompt_tokens(tok, "x", fmt="pi05_state")
    with pytest.raises(PromptError, match="'oxygen' does not include the state"):
        build_prompt_tokens(tok, "x", state=[0.0], fmt="oxygen")
    with pytest.raises(PromptError, match="unknown prompt format 'pi0'"):
        build_prompt_tokens(tok, "x", fmt="pi0")  # type: ignore[arg-type]
    with pytest.raises(PromptError, match="1-D"):
        build_prompt_tokens(tok, "x", state=np.zeros((2, 2)))


def test_prompt_too_long_and_truncation(tok: Tokenizer) -> None:
    task, state = "pick up the red cube and put it in the box", np.linspace(-0.9, 0.9, 14)
    full = build_prompt_tokens(tok, task, state=state)
    assert len(full) > 20
    with pytest.raises(PromptTooLongError) as info:
        build_prompt_tokens(tok, task, state=state, max_tokens=20)
    assert info.value.num_tokens == len(full) and info.value.max_tokens == 20
    assert f"{len(full)} tokens but at most 20" in str(info.value)
    cut = build_prompt_tokens(tok, task, state=state, max_tokens=20, truncate=True)
    assert cut.truncated and cut.ids == full.ids[:20]
    fits = build_prompt_tokens(tok, task, state=state, max_tokens=len(full))
    assert not fits.truncated and fits.ids == full.ids


def test_continuation_tokens_have_no_bos(tok: Tokenizer) -> None:
    ids = continuation_tokens(tok, "Subtask: grasp the handle")
    assert ids and ids[0] != tok.bos_id
    assert ids == tok.encode("Subtask: grasp the handle")
    assert continuation_tokens(tok, "") == []


# ------------------------------------------------------------------------------ Hugging Face folders
@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Path:
    """The trained SentencePiece model converted to tokenizer.json by transformers (GemmaConverter)."""
    import shutil

    from transformers import GemmaTokenizer

    source = tmp_path_factory.mktemp("sp")
    shutil.copy(model_path, source / "tokenizer.model")
    hf = GemmaTokenizer.from_pretrained(source, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    out = tmp_path_factory.mktemp("hf")
    hf.save_pretrained(out)
    return out


TEXTS = [
    "Task: pick up the red cube, State: 12 -1 255;\nAction: ",
    "  two  spaces, tabs\tand_underscores\n\n",
    "héllo wörld: ünïcode, 日本語 and 🤖 through byte fallback",
    "Memory: the cup was moved 3 times.",
]


def test_hugging_face_folder_gives_the_same_ids_and_text(tok: Tokenizer, hf_folder: Path) -> None:
    from transformers import AutoTokenizer

    from oxygen_ros.model.tokenizers.tokenizer_hf import HFTokenizer, load_tokenizer

    hf = load_tokenizer(hf_folder)
    assert isinstance(hf, HFTokenizer)
    assert (hf.bos_id, hf.eos_id, hf.pad_id, hf.unk_id) == (tok.bos_id, tok.eos_id, tok.pad_id, tok.unk_id)
    assert hf.strips_leading_space == tok.strips_leading_space is False
    auto = AutoTokenizer.from_pretrained(hf_folder)  # what LeRobot's TokenizerProcessorStep loads
    for text in TEXTS:
        ids = tok.encode(text, add_bos=True)
        assert hf.encode(text, add_bos=True) == ids
        assert auto(text, add_special_tokens=False)["input_ids"] == ids[1:]
        assert hf.decode(ids) == tok.decode(ids) == text
        stream = IncrementalDecoder(hf)
        assert "".join(stream.push(i) for i in ids[1:]) + stream.flush() == text
        assert [hf.piece_bytes(i) for i in ids] == [tok.piece_bytes(i) for i in ids]
    assert load_tokenizer(hf_folder / "tokenizer.json").encode(TEXTS[0]) == tok.encode(TEXTS[0])


def test_load_tokenizer_forms_and_errors(tmp_path: Path, model_path: Path) -> None:
    import shutil

    from oxygen_ros.model.tokenizers.tokenizer_hf import load_tokenizer

    assert type(load_tokenizer(model_path)) is Tokenizer
    folder = tmp_path / "openpi"
    folder.mkdir()
    shutil.copy(model_path, folder / "paligemma_tokenizer.model")
    assert type(load_tokenizer(folder)) is Tokenizer
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerError, match="no tokenizer.json or paligemma_tokenizer.model"):
        load_tokenizer(tmp_path / "empty")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="not a valid tokenizers file"):
        load_tokenizer(tmp_path / "bad.json")
