"""SentencePiece tokenizer with the PaliGemma layout, streaming decoding, and a tiny trainer for tests/demo.

The real pi0.5 checkpoints use PaliGemma's SentencePiece model (pad=0, eos=1, bos=2, unk=3, byte fallback,
digits split, no text normalization). Nothing here downloads it: `Tokenizer.from_file` loads a local copy, and
`train_tokenizer` builds a small model with the same special-id layout from a built-in robotics corpus.
"""

from __future__ import annotations

import codecs
import copy
import io
import os
import random
import string
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

# PaliGemma / Gemma special ids.
PAD_ID = 0
EOS_ID = 1
BOS_ID = 2
UNK_ID = 3

# What SentencePiece prints for an unknown id (its default `unk_surface`).
_UNK_SURFACE = " \u2047 "
_SPACE_MARK = "\u2581"  # '▁', SentencePiece's visible space


class TokenizerError(RuntimeError):
    """A tokenizer model is missing, unreadable or unsuitable, or training failed."""


class Tokenizer:
    """A loaded SentencePiece model with the small API the model and engine need."""

    def __init__(self, processor: spm.SentencePieceProcessor, source: str = "<memory>") -> None:
        self._sp = processor
        self.source = source
        self._dropout = 0.0  # BPE-dropout of encode (``sampling``); 0 = the one canonical segmentation
        self._piece_bytes: dict[int, bytes] = {}
        # SentencePiece drops one leading space from the decoded text when the model adds a dummy prefix on
        # encode (Gemma does not). Probe it instead of parsing the model proto.
        self._strips_leading_space = self._probe_strips_leading_space()

    # ---- construction -------------------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> "Tokenizer":
        """Load a SentencePiece `.model` file; raise `TokenizerError` if it is missing or not a valid model."""
        path = Path(path)
        if not path.is_file():
            raise TokenizerError(f"tokenizer model not found: {path}")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise TokenizerError(f"cannot read tokenizer model {path}: {exc}") from exc
        return cls.from_bytes(data, source=str(path))

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<memory>") -> "Tokenizer":
        """Load a serialized SentencePiece model proto."""
        if not data:
            raise TokenizerError(f"tokenizer model {source} is empty")
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(data)
        except Exception as exc:  # sentencepiece raises RuntimeError/OSError depending on the failure
            raise TokenizerError(f"tokenizer model {source} is not a valid SentencePiece model: {exc}") from exc
        if processor.vocab_size() <= 0:
            raise TokenizerError(f"tokenizer model {source} has an empty vocabulary")
        return cls(processor, source)

    # ---- special ids ---------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return int(self._sp.vocab_size())

    @property
    def bos_id(self) -> int:
        return int(self._sp.bos_id())

    @property
    def eos_id(self) -> int:
        return int(self._sp.eos_id())

    @property
    def pad_id(self) -> int:
        return int(self._sp.pad_id())

    @property
    def unk_id(self) -> int:
        return int(self._sp.unk_id())

    def check_compatible(self, vocab_size: int, bos_id: int, eos_id: int, pad_id: int) -> None:
        """Raise `TokenizerError` unless this tokenizer fits a model with these sizes and special ids.

        Call with the `ModelConfig` fields (vocab_size, bos_token_id, eos_token_id, pad_token_id).
        """
        problems = []
        if self.vocab_size > vocab_size:
            problems.append(f"vocabulary {self.vocab_size} > model vocab_size {vocab_size}")
        pairs = (("bos", self.bos_id, bos_id), ("eos", self.eos_id, eos_id), ("pad", self.pad_id, pad_id))
        for name, mine, theirs in pairs:
            if mine != theirs:
                problems.append(f"{name} id {mine} != model {name}_token_id {theirs}")
        if problems:
            raise TokenizerError(f"tokenizer {self.source} does not fit the model: " + "; ".join(problems))

    def sampling(self, dropout: float, seed: int) -> "Tokenizer":
        """This tokenizer with BPE-dropout (Provilkov et al., 2020): each merge is skipped with probability
        ``dropout``, so one text gets other segmentations into smaller pieces, down to letters. For training
        inputs only: a model that has seen the small pieces reads a word it never saw whole (spelt in them)
        instead of meeting pieces it never learned. Seeds SentencePiece's global generator with ``seed``."""
        if not 0.0 < dropout < 1.0:
            raise ValueError(f"dropout must be in (0, 1), got {dropout}")
        spm.set_random_generator_seed(seed)
        other = copy.copy(self)
        other._dropout = dropout
        return other

    # ---- encode / decode -----------------------------------------------------------------------------------
    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of `text`, optionally with BOS in front and EOS at the end."""
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, not {type(text).__name__}")
        if self._dropout:
            ids = self._sp.encode(text, add_bos=add_bos, add_eos=add_eos, enable_sampling=True, alpha=self._dropout, nbest_size=-1)
        else:
            ids = self._sp.encode(text, add_bos=add_bos, add_eos=add_eos)
        return [int(i) for i in ids]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`; control tokens (pad/bos/eos) decode to nothing."""
        ids = [self._check_id(i) for i in ids]
        return str(self._sp.decode(ids))

    def id_to_piece(self, token_id: int) -> str:
        return str(self._sp.id_to_piece(self._check_id(token_id)))

    def is_byte(self, token_id: int) -> bool:
        return bool(self._sp.is_byte(self._check_id(token_id)))

    def piece_bytes(self, token_id: int) -> bytes:
        """The UTF-8 bytes one token contributes to decoded text (before the leading-space rule)."""
        cached = self._piece_bytes.get(token_id)
        if cached is not None:
            return cached
        sp = self._sp
        token_id = self._check_id(token_id)
        if sp.is_control(token_id) or sp.is_unused(token_id):
            out = b""
        elif sp.is_unknown(token_id):
            out = _UNK_SURFACE.encode()
        elif sp.is_byte(token_id):
            # Byte pieces are spelled "<0xAB>".
            out = bytes([int(sp.id_to_piece(token_id)[3:5], 16)])
        else:
            out = sp.id_to_piece(token_id).replace(_SPACE_MARK, " ").encode("utf-8")
        self._piece_bytes[token_id] = out
        return out

    @property
    def strips_leading_space(self) -> bool:
        """Whether `decode` drops one leading space (models trained with a dummy prefix)."""
        return self._strips_leading_space

    def _check_id(self, token_id: int) -> int:
        token_id = int(token_id)
        if not 0 <= token_id < self.vocab_size:
            raise TokenizerError(f"token id {token_id} is outside the vocabulary [0, {self.vocab_size})")
        return token_id

    def _probe_strips_leading_space(self) -> bool:
        sp = self._sp
        for token_id in range(sp.vocab_size()):
            if sp.is_control(token_id) or sp.is_byte(token_id) or sp.is_unknown(token_id) or sp.is_unused(token_id):
                continue
            piece = sp.id_to_piece(token_id)
            if piece.startswith(_SPACE_MARK):
                return not sp.decode([token_id]).startswith(" ")
        return False

    def __repr__(self) -> str:
        return f"Tokenizer(source={self.source!r}, vocab_size={self.vocab_size})"


class IncrementalDecoder:
    """Turns a growing list of generated token ids into text deltas.

    Tokens are converted to bytes piece by piece ('▁' becomes a space, byte-fallback pieces become raw bytes)
    and fed through an incremental UTF-8 decoder, so a character split over several byte tokens is emitted
    only when complete: no partial characters and no U+FFFD mid-stream. `flush()` ends the stream; bytes of
    a character that never completed come out as U+FFFD there. The concatenated deltas equal
    `tokenizer.decode(all_ids)` for well-formed output.

    `strip_leading_space`: drop one leading space of the stream. Default (None) follows `tokenizer.decode`;
    pass False when decoding a continuation whose leading space is meaningful.
    """

    def __init__(self, tokenizer: Tokenizer, strip_leading_space: bool | None = None) -> None:
        self._tok = tokenizer
        self._strip = tokenizer.strips_leading_space if strip_leading_space is None else strip_leading_space
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._at_start = True
        self._num_tokens = 0
        self._parts: list[str] = []
        self._finished = False

    @property
    def num_tokens(self) -> int:
        """How many token ids have been pushed."""
        return self._num_tokens

    @property
    def text(self) -> str:
        """All text emitted so far."""
        return "".join(self._parts)

    def push(self, ids: int | Sequence[int]) -> str:
        """Add one or more new token ids; return the text that became complete (possibly "")."""
        if self._finished:
            raise TokenizerError("IncrementalDecoder.push() after flush(); make a new decoder")
        if isinstance(ids, int):
            ids = [ids]
        data = b"".join(self._tok.piece_bytes(i) for i in ids)
        self._num_tokens += len(ids)
        return self._emit(self._utf8.decode(data, final=False))

    def update(self, all_ids: Sequence[int]) -> str:
        """Give the whole generated list so far; decode only the ids not seen yet."""
        if len(all_ids) < self._num_tokens:
            raise TokenizerError(f"token list shrank from {self._num_tokens} to {len(all_ids)} ids")
        return self.push(list(all_ids[self._num_tokens :]))

    def flush(self) -> str:
        """End the stream; return any remaining text (an incomplete character becomes U+FFFD)."""
        if self._finished:
            return ""
        self._finished = True
        return self._emit(self._utf8.decode(b"", final=True))

    def _emit(self, text: str) -> str:
        if self._at_start and text:
            self._at_start = False
            if self._strip and text.startswith(" "):
                text = text[1:]
        if text:
            self._parts.append(text)
        return text


# ---- training --------------------------------------------------------------------------------------------

_OBJECTS = [
    "cube", "block", "cup", "mug", "bowl", "plate", "bottle", "can", "sponge", "towel", "spoon", "fork",
    "knife", "apple", "banana", "orange", "lid", "box", "drawer", "door", "shelf", "basket", "tray", "pen",
    "marker", "book", "shirt", "sock", "bag", "jar", "pot", "pan", "kettle", "toy", "ball", "cable",
]
_COLOURS = ["red", "green", "blue", "yellow", "black", "white", "orange", "purple", "pink", "grey", "brown"]
_PLACES = [
    "table", "counter", "sink", "bin", "shelf", "drawer", "box", "basket", "tray", "stove", "cabinet",
    "left side", "right side", "top rack", "bottom shelf", "dish rack", "laundry basket",
]
_VERBS = ["pick up", "put", "place", "move", "push", "pull", "open", "close", "lift", "grasp", "stack", "fold",
          "wipe", "pour", "turn", "rotate", "slide", "drop", "hand over", "sort"]
_RELATIONS = ["on", "in", "into", "next to", "behind", "in front of", "under", "on top of", "to the left of"]
_SUBTASKS = [
    "move the arm above the {o}", "grasp the {c} {o}", "lift the {o}", "move to the {p}", "lower the {o}",
    "release the gripper", "open the gripper", "close the gripper", "rotate the wrist", "align with the {o}",
    "approach the {p}", "retreat from the {p}", "push the {o} forward", "pull the {o} back",
]
_MEMORY = [
    "the {c} {o} is already in the {p}", "the {o} was moved {n} times", "the {p} is empty",
    "the gripper dropped the {o}", "remember that the {c} {o} is fragile", "the {o} is behind the {c} {o}",
    "step {n} of the task is done", "the previous grasp failed", "the {p} door is open",
]


def robot_corpus(num_sentences: int = 600, seed: int = 0) -> list[str]:
    """A deterministic robotics-flavoured English corpus: tasks, subtasks, memory notes and full prompts.

    ASCII only, so multi-byte characters always go through byte fallback in a tokenizer trained on it.
    """
    rng = random.Random(seed)

    def fill(template: str) -> str:
        return template.format(
            o=rng.choice(_OBJECTS), c=rng.choice(_COLOURS), p=rng.choice(_PLACES), n=rng.randint(1, 9)
        )

    def task() -> str:
        verb, obj, colour = rng.choice(_VERBS), rng.choice(_OBJECTS), rng.choice(_COLOURS)
        return f"{verb} the {colour} {obj} {rng.choice(_RELATIONS)} the {rng.choice(_PLACES)}"

    out: list[str] = []
    for i in range(num_sentences):
        kind = i % 6
        if kind == 0:
            out.append(task().capitalize() + ".")
        elif kind == 1:
            out.append(fill(rng.choice(_SUBTASKS)))
        elif kind == 2:
            out.append("Memory: " + fill(rng.choice(_MEMORY)) + ".")
        elif kind == 3:
            state = " ".join(str(rng.randint(0, 255)) for _ in range(rng.randint(4, 8)))
            out.append(f"Task: {task()}, State: {state};\nAction: ")
        elif kind == 4:
            out.append(f"Task: {task()}. Subtask: {fill(rng.choice(_SUBTASKS))}")
        else:
            out.append(f"{task()}, then {fill(rng.choice(_SUBTASKS))}!\n")
    return out


def train_tokenizer(
    path: str | os.PathLike[str], vocab_size: int, corpus: Iterable[str] | None = None, fold_case: bool = False
) -> Tokenizer:
    """Train a small BPE SentencePiece model with the PaliGemma special-id layout and write it to `path`.

    pad=0, eos=1, bos=2, unk=3, byte fallback, split digits, identity normalization and no dummy prefix, as
    in Gemma's tokenizer. Single-threaded over an unshuffled corpus, so the same inputs give the same file.
    `vocab_size` must be above 260 (specials + 256 byte pieces + the corpus' characters).
    `fold_case`: the model's normalizer maps ASCII capitals to lower case (an uncased tokenizer: "PICK" and
    "pick" are the same pieces, and decoded text is lower case); everything else stays identity.
    """
    sentences = [s for s in (robot_corpus() if corpus is None else corpus) if s]
    if not sentences:
        raise TokenizerError("cannot train a tokenizer on an empty corpus")
    path = Path(path)
    model = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp:
        normalization = {"normalization_rule_name": "identity"}
        if fold_case:  # SentencePiece's own rule format: source and target code points in hex, tab-separated
            rules = Path(tmp) / "fold_case.tsv"
            rules.write_text("".join(f"{ord(c):x}\t{ord(c.lower()):x}\n" for c in string.ascii_uppercase))
            normalization = {"normalization_rule_tsv": str(rules)}
        _train_spm(sentences, model, vocab_size, normalization, path)
    data = model.getvalue()
    if fold_case:  # the proto records the rule file's (temporary) path: drop it, so the same inputs give the same file
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(data)
        proto.normalizer_spec.ClearField("normalization_rule_tsv")
        data = proto.SerializeToString()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write atomically so a concurrent reader never sees half a model.
    fd, tmp_path = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp_path, path)
    except BaseException:
        Path(tmp_path).unlink(missing_ok=True)
        raise
    return Tokenizer.from_bytes(data, source=str(path))


def _train_spm(sentences: list[str], model: io.BytesIO, vocab_size: int, normalization: dict[str, str], path: Path) -> None:
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            vocab_size=vocab_size,
            model_type="bpe",
            pad_id=PAD_ID,
            eos_id=EOS_ID,
            bos_id=BOS_ID,
            unk_id=UNK_ID,
            byte_fallback=True,
            split_digits=True,
            **normalization,
            add_dummy_prefix=False,
            remove_extra_whitespaces=False,
            allow_whitespace_only_pieces=True,
            user_defined_symbols=["\n"],
            character_coverage=1.0,
            num_threads=1,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            minloglevel=2,
        )
    except Exception as exc:  # sentencepiece reports bad sizes as RuntimeError with its own text
        raise TokenizerError(f"training a {vocab_size}-piece tokenizer for {path} failed: {exc}") from exc
