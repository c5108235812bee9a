"""Questions about the scene asked while the robot acts, with the answers the simulator's truth gives.

Three kinds: where an object stands ("where is the red ball?" → "far left", "not here" when absent), what
stands next to it on its left or right as the robot sees it ("what is left of the blue cup?" → "green ball",
"nothing"), and what the gripper holds ("what is in the gripper?" → "red cup", "nothing"). The training data
ask them in the ``train`` phrasings; the eval also in ``held_out`` ones. Answers are compared after
stripping and lower-casing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .expert import REACHES, location_text
from .scene import COLOURS, KINDS, Scene

KINDS_OF_QUESTION = ("where", "left", "right", "held")
PHRASINGS = {
    "train": {
        "where": ("where is the {}?", "where's the {}?", "where is the {}"),
        "left": ("what is left of the {}?", "what is to the left of the {}?"),
        "right": ("what is right of the {}?", "what is to the right of the {}?"),
        "held": ("what is in the gripper?", "what are you holding?", "what do you hold?"),
    },
    "held_out": {
        "where": ("Where is the {}?", "where can i find the {}?"),
        "left": ("What is left of the {}?", "what's on the left of the {}?"),
        "right": ("What is right of the {}?", "what's on the right of the {}?"),
        "held": ("What is in the gripper?", "what's in your gripper?"),
    },
}
NOTHING = "nothing"
NOT_HERE = "not here"
# Tokens an answer may take: room for a tokenizer that spells words letter by letter (a 384-piece one spelt
# " near centre" in 12 pieces, and a budget of 8 cut true answers to "near ri"); the demo's takes 2.
ANSWER_MAX_TOKENS = 16
SIDE_M = 0.075  # across-the-table distance beyond which an object is to one side of another (half a column)


@dataclass(frozen=True)
class Question:
    kind: str
    text: str
    about: str | None  # the object it names (None for "held")


def answer(scene: Scene, question: Question) -> str:
    """The simulator's true answer to ``question`` in ``scene`` as it is now."""
    if question.kind == "held":
        return NOTHING if scene.held is None else scene.objects[scene.held].name
    index = scene.find(question.about or "")
    if index is None:
        return NOT_HERE
    if question.kind == "where":
        return location_text(scene, index) or NOT_HERE
    beside = _beside(scene, index, question.kind)
    return NOTHING if beside is None else scene.objects[beside].name


def _beside(scene: Scene, index: int, side: str) -> int | None:
    """The object nearest to object ``index`` among those on its ``side`` ("left" or "right", as the robot
    sees it), None when there is none."""
    me = scene.objects[index]
    sign = 1.0 if side == "left" else -1.0
    beside = [i for i, o in enumerate(scene.objects) if o is not me and sign * (o.position[1] - me.position[1]) > SIDE_M]
    if not beside:
        return None
    return min(beside, key=lambda i: float(np.hypot(*(scene.objects[i].position[:2] - me.position[:2]))))


def objects_read(scene: Scene, question: Question) -> tuple[int | None, ...]:
    """The objects a model has to look at to answer ``question``, in order (indices in ``scene``): the one it
    is about, then the one the answer names ("where": the same one again, its place is the answer). None
    where the look finds no object: both looks for an object the scene lacks ("not here"), the second for
    "nothing" beside it. Questions about the gripper read none (an empty tuple)."""
    if question.kind == "held":
        return ()
    index = scene.find(question.about or "")
    if index is None:
        return None, None
    return index, index if question.kind == "where" else _beside(scene, index, question.kind)


def draw_question(scene: Scene, rng: np.random.Generator, split: str = "train", absent_p: float = 0.1) -> Question:
    """A question about ``scene``: a random kind, about one of its objects (or, with ``absent_p``, an absent one)."""
    kind = KINDS_OF_QUESTION[int(rng.integers(len(KINDS_OF_QUESTION)))]
    phrasings = PHRASINGS[split][kind]
    text = phrasings[int(rng.integers(len(phrasings)))]
    if kind == "held":
        return Question(kind, text, None)
    names = [o.name for o in scene.objects]
    if rng.random() < absent_p:
        others = sorted({f"{c} {k}" for c in COLOURS for k in KINDS} - set(names))
        names = others or names
    about = names[int(rng.integers(len(names)))]
    return Question(kind, text.format(about), about)


def answer_kind(text: str) -> str:
    """What kind of answer a true answer is: "nothing", "not here", "place" ("near left") or "object"."""
    if text in (NOTHING, NOT_HERE):
        return text
    return "place" if text.split(" ", 1)[0] in REACHES else "object"


def all_answers() -> list[str]:
    """Every answer text (for a tokenizer's corpus)."""
    names = [f"{c} {k}" for c in COLOURS for k in KINDS]
    places = [f"{r} {s}" for r in ("near", "far") for s in ("left", "centre", "right")]
    return [*names, *places, NOTHING, NOT_HERE]


def demo_questions(name: str) -> tuple[str, str]:
    """The two questions the demo asks in an episode whose instruction names ``name``: where it is, then what
    the gripper holds (each the training data's first phrasing)."""
    return PHRASINGS["train"]["where"][0].format(name), PHRASINGS["train"]["held"][0]


def scene_answers(scene: Scene) -> dict[str, str]:
    """The true answers, now, to the demo's questions about every object of ``scene`` (question → answer)."""
    out = {}
    for o in scene.objects:
        where, held = demo_questions(o.name)
        out[where] = answer(scene, Question("where", where, o.name))
    out[held] = answer(scene, Question("held", held, None))
    return out
