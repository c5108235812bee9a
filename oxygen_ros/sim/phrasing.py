"""Instructions as people type them: families of phrasings, one generator for the training data and the eval.

An instruction names an object ("red cup") inside a verb phrase ("pick up the red cup"), maybe wrapped in
politeness ("please ..."), then typed: letter case, a final mark, extra spaces. A *family* varies one of these
(``capitalized``, ``please``, ``kind_synonym``, ...) on top of the plain templates; ``typed`` varies them all
at once. Every family draws its words from one of two splits: ``train`` (what the demo policy's data use)
and ``held_out`` (the training words and about as many others never in the data: verbs, wrappers, final
marks), so an evaluation covers both learned and new phrasings. Kind synonyms are the usual words for the three kinds (mug, cube, sphere,
...): a policy cannot guess a word it never saw, so both splits share them.

`target_in` reads the object an instruction names back (case, punctuation, spacing and kind synonyms
ignored), for instructions given as free text. `with_filler` puts a made-up word into an instruction, for
the training data only: a stand-in for every word a user may type that the data never show.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from .scene import COLOURS, KINDS

PLAIN_TEMPLATES = ("pick up the {}", "grab the {}", "get me the {}")
SPLITS = ("train", "held_out")

KIND_SYNONYMS = {"cup": ("mug",), "block": ("cube", "brick"), "ball": ("sphere",)}
_TRAIN_VERBS = ("pick up the {}", "grab the {}", "get me the {}", "lift the {}", "take the {}", "fetch the {}",
                "bring me the {}", "pick the {} up")
_TRAIN_POLITE = ("please {}", "{} please", "could you {}", "can you {}", "{}, thanks")
_TRAIN_MARKS = (".", "!", "?", " .")
# held_out: the training words and words never in the data (an evaluation sees both, new ones half the time)
VERBS = {"train": _TRAIN_VERBS, "held_out": (*_TRAIN_VERBS, "hand me the {}", "raise the {}", "grab that {}",
                                             "get the {}", "collect the {}", "pick up that {}", "give me the {}")}  # fmt: skip
POLITE = {"train": _TRAIN_POLITE, "held_out": (*_TRAIN_POLITE, "would you {}", "kindly {}", "{} for me", "please, {}",
                                               "i'd like you to {}")}  # fmt: skip
MARKS = {"train": _TRAIN_MARKS, "held_out": (*_TRAIN_MARKS, "!!", "...", " !", ";")}

# family -> the parts it varies on top of a plain template
FAMILY_PARTS: dict[str, tuple[str, ...]] = {
    "plain": (),
    "capitalized": ("capital",),
    "full_stop": ("capital", "stop"),
    "please": ("polite",),
    "upper": ("upper",),
    "kind_synonym": ("synonym",),
    "verb_synonym": ("verb",),
    "spacing": ("spacing",),
    "typed": ("verb", "polite", "synonym", "case", "mark", "spacing"),
}
FAMILIES = tuple(FAMILY_PARTS)


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _case(text: str, how: str) -> str:
    if how == "capital":
        return text[:1].upper() + text[1:]
    if how == "upper":
        return text.upper()
    if how == "title":
        return text.title()
    return text


def _spaced(text: str, rng: np.random.Generator) -> str:
    """Extra spaces: doubled between some words, maybe before or after the text."""
    words = text.split(" ")
    out = words[0]
    for w in words[1:]:
        out += (" " * int(rng.integers(1, 4)) if rng.random() < 0.4 else " ") + w
    return " " * int(rng.random() < 0.3) + out + " " * int(rng.integers(0, 3))


def phrase(name: str, family: str, rng: np.random.Generator, split: str = "train") -> str:
    """An instruction of ``family`` naming ``name`` ("red cup"), its words from ``split``."""
    if family not in FAMILY_PARTS:
        raise ValueError(f"unknown instruction family {family!r}; choose one of {', '.join(FAMILIES)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    parts = FAMILY_PARTS[family]
    typed = family == "typed"
    colour, kind = name.split(" ", 1)
    if "synonym" in parts and (not typed or rng.random() < 0.5):
        kind = _pick(rng, KIND_SYNONYMS.get(kind, (kind,)))
    verbs = VERBS[split] if "verb" in parts else PLAIN_TEMPLATES
    text = _pick(rng, verbs).format(f"{colour} {kind}")
    if "polite" in parts and (not typed or rng.random() < 0.5):
        text = _pick(rng, POLITE[split]).format(text)
    if "capital" in parts:
        text = _case(text, "capital")
    if "upper" in parts:
        text = _case(text, "upper")
    if "case" in parts:
        text = _case(text, _pick(rng, ("lower", "capital", "capital", "upper", "title")))
    if "stop" in parts:
        text += "."
    if "mark" in parts and rng.random() < 0.6:
        text += _pick(rng, MARKS[split])
    if "spacing" in parts and (not typed or rng.random() < 0.4):
        text = _spaced(text, rng)
    return text


# English letter frequencies (per mille), so made-up words break into the pieces real unseen words break into
_LETTER_FREQ = np.array([82, 15, 28, 43, 127, 22, 20, 61, 70, 2, 8, 40, 24, 67, 75, 19, 1, 60, 63, 91, 28, 10, 24, 2, 20, 1],
                        dtype=np.float64)  # fmt: skip
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def made_up_word(rng: np.random.Generator) -> str:
    """A word of 2 to 8 random letters drawn with their English frequencies: a stand-in for any word the
    data never show."""
    letters = rng.choice(len(_LETTERS), size=int(rng.integers(2, 9)), p=_LETTER_FREQ / _LETTER_FREQ.sum())
    return "".join(_LETTERS[i] for i in letters)


def with_filler(text: str, rng: np.random.Generator) -> str:
    """``text`` with a made-up word at a random word boundary, never between an object's colour and kind, so a
    policy trained on it learns that words it does not know name nothing (training data only)."""
    words = text.split(" ")  # extra spaces give empty words: a boundary's word before it is the last non-empty one
    before = [next((w for w in reversed(words[:i]) if w), "") for i in range(len(words) + 1)]
    places = [i for i, w in enumerate(before) if w.strip(",.!?;").lower() not in COLOURS]
    at = places[int(rng.integers(len(places)))]
    return " ".join(words[:at] + [made_up_word(rng)] + words[at:])


def family_phrases(family: str, split: str = "train") -> Callable[[str, np.random.Generator], str]:
    """``phrase`` bound to a family and split: name, rng → instruction."""
    return lambda name, rng: phrase(name, family, rng, split)


_WORD = re.compile(r"[a-z]+")
_KIND_OF = {w: k for k in KINDS for w in (k, *KIND_SYNONYMS.get(k, ()))}


def target_in(instruction: str) -> str | None:
    """The first "colour kind" the instruction names (any case, punctuation or spacing; kind synonyms read
    as their kind), or None."""
    words = _WORD.findall(instruction.lower())
    for a, b in zip(words, words[1:]):
        if a in COLOURS and b in _KIND_OF:
            return f"{a} {_KIND_OF[b]}"
    return None
