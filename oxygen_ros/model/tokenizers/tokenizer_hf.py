"""The PaliGemma tokenizer as a Hugging Face folder (``tokenizer.json`` + ``tokenizer_config.json``).

LeRobot loads ``google/paligemma-3b-pt-224`` with ``AutoTokenizer``, so LeRobot users have that folder rather
than openpi's ``paligemma_tokenizer.model``. ``tokenizer.json`` is the SentencePiece model converted by
transformers' ``GemmaConverter``: the same vocabulary and ids, ``▁`` for spaces and ``<0xAB>`` byte-fallback
pieces, so it gives the same ids and the same decoded text. It is read with the ``tokenizers`` library (what
``AutoTokenizer`` wraps); BOS is added here, as for the SentencePiece model, rather than by the file's
post-processor. :func:`load_tokenizer` accepts either form.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Sequence

from tokenizers import Tokenizer as HFBackend

from oxygen_ros.model.tokenizers.tokenizer import _SPACE_MARK, _UNK_SURFACE, Tokenizer, TokenizerError

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SENTENCEPIECE_NAMES = ("paligemma_tokenizer.model", "tokenizer.model")
# PaliGemma's special pieces, used when tokenizer_config.json does not name them.
_DEFAULT_SPECIALS = {"pad": "<pad>", "eos": "<eos>", "bos": "<bos>", "unk": "<unk>"}
_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


class HFTokenizer(Tokenizer):
    """A ``tokenizer.json`` behind the :class:`Tokenizer` API (encode/decode/piece bytes/special ids)."""

    def __init__(self, backend: HFBackend, specials: dict[str, str], source: str) -> None:
        self._hf = backend
        self.source = source
        self._piece_bytes: dict[int, bytes] = {}
        self._ids: dict[str, int] = {}
        for role, piece in specials.items():
            token_id = backend.token_to_id(piece)
            if token_id is None:
                raise TokenizerError(f"tokenizer {source}: its {role} token {piece!r} is not in the vocabulary")
            self._ids[role] = token_id
        self._special = {t.content for t in backend.get_added_tokens_decoder().values() if t.special}
        self._strips_leading_space = self._probe_strips_leading_space()

    @classmethod
    def from_folder(cls, path: str | os.PathLike[str]) -> "HFTokenizer":
        """A folder with tokenizer.json (and tokenizer_config.json naming the special tokens), or the json itself."""
        path = Path(path)
        folder, file = (path.parent, path) if path.is_file() else (path, path / TOKENIZER_JSON)
        if not file.is_file():
            raise TokenizerError(f"no {TOKENIZER_JSON} in {folder}")
        try:
            backend = HFBackend.from_file(str(file))
        except Exception as exc:  # tokenizers raises its own Exception subclass with the parse error
            raise TokenizerError(f"{file} is not a valid tokenizers file: {exc}") from None
        specials = dict(_DEFAULT_SPECIALS)
        config_file = folder / TOKENIZER_CONFIG
        if config_file.is_file():
            try:
                config = json.loads(config_file.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise TokenizerError(f"cannot read {config_file}: {exc}") from None
            for role in specials:
                value = config.get(f"{role}_token")
                if isinstance(value, dict):  # older transformers write AddedToken dicts
                    value = value.get("content")
                if isinstance(value, str):
                    specials[role] = value
        return cls(backend, specials, str(file))

    @property
    def vocab_size(self) -> int:
        return int(self._hf.get_vocab_size(with_added_tokens=True))

    @property
    def bos_id(self) -> int:
        return self._ids["bos"]

    @property
    def eos_id(self) -> int:
        return self._ids["eos"]

    @property
    def pad_id(self) -> int:
        return self._ids["pad"]

    @property
    def unk_id(self) -> int:
        return self._ids["unk"]

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, not {type(text).__name__}")
        ids = list(self._hf.encode(text, add_special_tokens=False).ids)
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Sequence[int]) -> str:
        ids = [self._check_id(i) for i in ids]
        return str(self._hf.decode(ids, skip_special_tokens=True))

    def id_to_piece(self, token_id: int) -> str:
        return str(self._hf.id_to_token(self._check_id(token_id)))

    def is_byte(self, token_id: int) -> bool:
        return _BYTE_PIECE.match(self.id_to_piece(token_id)) is not None

    def piece_bytes(self, token_id: int) -> bytes:
        cached = self._piece_bytes.get(token_id)
        if cached is not None:
            return cached
        piece = self.id_to_piece(token_id)
        byte = _BYTE_PIECE.match(piece)
        if token_id == self.unk_id:
            out = _UNK_SURFACE.encode()
        elif piece in self._special:
            out = b""
        elif byte:
            out = bytes([int(byte.group(1), 16)])
        else:
            out = piece.replace(_SPACE_MARK, " ").encode("utf-8")
        self._piece_bytes[token_id] = out
        return out

    def _probe_strips_leading_space(self) -> bool:
        for piece, token_id in sorted(self._hf.get_vocab(with_added_tokens=False).items(), key=lambda kv: kv[1]):
            if piece.startswith(_SPACE_MARK) and len(piece) > 1 and piece not in self._special:
                return not self._hf.decode([token_id]).startswith(" ")
        return False


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """A SentencePiece ``.model`` file, a ``tokenizer.json``, or a folder holding either (json preferred)."""
    path = Path(path)
    if path.is_dir():
        if (path / TOKENIZER_JSON).is_file():
            return HFTokenizer.from_folder(path)
        for name in SENTENCEPIECE_NAMES:
            if (path / name).is_file():
                return Tokenizer.from_file(path / name)
        raise TokenizerError(f"{path}: no {TOKENIZER_JSON} or {' / '.join(SENTENCEPIECE_NAMES)} in this folder")
    if path.name.endswith(".json"):
        return HFTokenizer.from_folder(path)
    return Tokenizer.from_file(path)
