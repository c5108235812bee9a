"""A small synthetic stand-in for the simulator's expert (training tests only).

Each episode: one coloured square on a grey table at a seeded place in the base view (and larger in the
wrist view); the "arm" state moves toward a target that depends on the square's place; the texts name the
object and the phase. Enough structure for a few training steps to lower both losses.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

COLOURS = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (50, 70, 230)}
KINDS = ("cup", "block", "ball")
STATE_DIM = 5
STEPS = 6


@dataclass(frozen=True)
class FakeSample:
    images: tuple[np.ndarray, ...]
    state: np.ndarray
    actions: np.ndarray
    instruction: str
    texts: dict[str, str]
    target_uvs: tuple[tuple[float, float] | None, ...] = ()  # the square's centre in each view, as fractions
    question: str = ""  # every other sample asks where the object is (texts["ask"] answers), the others nothing
    object_uvs: tuple[tuple[tuple[float, float, str], ...], ...] = ()  # the square, named, in each view
    # per text task, per read: where the object its text looks at is (the square: the memory note's second read,
    # both reads of the question)
    text_uvs: dict[str, tuple[tuple[tuple[float, float] | None, ...], ...]] = field(default_factory=dict)


def _centre(size: int, xy: np.ndarray, half: int) -> np.ndarray:
    return (xy * (size - 2 * half) + half).astype(int)


def _image(size: int, xy: np.ndarray, colour: tuple[int, int, int], half: int) -> np.ndarray:
    img = np.full((size, size, 3), 120, dtype=np.uint8)
    cx, cy = _centre(size, xy, half)
    img[max(0, cy - half) : cy + half, max(0, cx - half) : cx + half] = colour
    return img


def fake_expert_samples(seed: int, horizon: int, control_period_s: float, image_size: int) -> Iterator[FakeSample]:
    """Samples of seeded episodes, forever (as the simulator's ``expert_samples``)."""
    rng = np.random.default_rng(seed)
    while True:
        yield from _episode(rng, horizon, control_period_s, image_size)


def _episode(rng: np.random.Generator, horizon: int, control_period_s: float, image_size: int) -> Iterator[FakeSample]:
    colour = list(COLOURS)[int(rng.integers(len(COLOURS)))]
    kind = KINDS[int(rng.integers(len(KINDS)))]
    xy = rng.uniform(0.1, 0.9, size=2)
    target = np.concatenate([xy * 2 - 1, [0.5, -0.3, 1.0]]).astype(np.float32)
    state = rng.uniform(-0.2, 0.2, size=STATE_DIM).astype(np.float32)
    rate = 0.3 * control_period_s / 0.2
    uvs = tuple(tuple(float(c) / image_size for c in _centre(image_size, xy, half)) for half in (4, 12))
    for step in range(STEPS):
        phase = "move to" if step < STEPS // 2 else "grasp"
        chunk, s = [], state.copy()
        for _ in range(horizon):
            s = s + rate * (target - s)
            chunk.append(s.copy())
        yield FakeSample(
            images=(_image(image_size, xy, COLOURS[colour], 4), _image(image_size, xy, COLOURS[colour], 12)),
            state=state.copy(),
            actions=np.stack(chunk).astype(np.float32),
            instruction=f"pick up the {colour} {kind}",
            target_uvs=uvs,
            object_uvs=tuple(((*(float(c) / image_size for c in _centre(image_size, xy, half)), f"{colour} {kind}"),)
                             for half in (4, 12)),
            texts={
                "language": f"{phase} the {colour} {kind}",
                "memory": f"the {colour} {kind} is on the table",
                "location": ("near " if xy[1] < 0.5 else "far ") + ("left" if xy[0] < 0.5 else "right"),
                **({"ask": "on the left" if xy[0] < 0.5 else "on the right"} if step % 2 else {}),
            },
            question=f"where is the {colour} {kind}?" if step % 2 else "",
            # every other question's second look finds no object (None): the pointing loss's ELSEWHERE
            text_uvs={"memory": ((), uvs), **({"ask": (uvs, uvs if step % 4 == 1 else None)} if step % 2 else {})},
        )
        state = chunk[0]
