"""What a user varies about a scene: the lighting of each camera, distractors, a named object that is absent.

* Lighting: brightness (a gain) and contrast (around the image's mean) per camera image, as a camera's
  exposure and a room's light change them; ``Lighting.random`` draws both within ±``LIGHTING_SPREAD`` per
  camera (the training data's augmentation and the eval's ``lighting`` family).
* Distractors: one more object on a free place, of the named object's colour and another kind
  (``same_colour``), or of its kind and another colour (``same_kind``): only the kind word, or only the colour
  word, tells the named object apart.
* Absent: a name of no object of the scene, preferably an object's colour with another kind (the confusable
  case); nothing should be lifted, and the narration says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .scene import COLOURS, KINDS, PLACE_COLUMNS_M, PLACE_JITTER_M, PLACE_ROWS_M, Scene, SceneObject

LIGHTING_SPREAD = 0.2
DISTRACTORS = ("same_colour", "same_kind")


@dataclass(frozen=True)
class Lighting:
    brightness: tuple[float, ...] = (1.0, 1.0)  # per camera image (base, wrist)
    contrast: tuple[float, ...] = (1.0, 1.0)

    @property
    def neutral(self) -> bool:
        return all(v == 1.0 for v in (*self.brightness, *self.contrast))

    @classmethod
    def random(cls, rng: np.random.Generator, spread: float = LIGHTING_SPREAD, cameras: int = 2) -> "Lighting":
        b, c = rng.uniform(1 - spread, 1 + spread, (2, cameras))
        return cls(tuple(float(x) for x in b), tuple(float(x) for x in c))

    def apply(self, images: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        if self.neutral:
            return images
        return tuple(adjust(im, self.brightness[i % len(self.brightness)], self.contrast[i % len(self.contrast)])
                     for i, im in enumerate(images))  # fmt: skip


def adjust(image: np.ndarray, brightness: float, contrast: float) -> np.ndarray:
    """uint8 image with its contrast scaled around its mean, then its brightness scaled (clipped to 0-255)."""
    if brightness < 0 or contrast < 0:
        raise ValueError(f"brightness and contrast must be >= 0, got {brightness}, {contrast}")
    x = image.astype(np.float32)
    mean = float(x.mean())
    x = ((x - mean) * contrast + mean) * brightness
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def _free_place(scene: Scene, rng: np.random.Generator) -> np.ndarray | None:
    """A place of the grid no object stands on (jittered as the generator jitters), or None when all are taken."""
    places = [(x, y) for x in PLACE_ROWS_M for y in PLACE_COLUMNS_M]
    free = [p for p in places if all(np.hypot(o.position[0] - p[0], o.position[1] - p[1]) > 0.05 for o in scene.objects)]
    if not free:
        return None
    x, y = free[int(rng.integers(len(free)))]
    jitter = rng.uniform(-PLACE_JITTER_M, PLACE_JITTER_M, 2)
    return np.array([x + jitter[0], y + jitter[1], 0.0])


def add_distractor(scene: Scene, target_name: str, how: str, rng: np.random.Generator) -> SceneObject | None:
    """Put a ``how`` ("same_colour" | "same_kind") distractor of ``target_name`` on a free place of ``scene``;
    returns it (None: no free place). Its name differs from every object's in the scene."""
    if how not in DISTRACTORS:
        raise ValueError(f"unknown distractor {how!r}; choose one of {DISTRACTORS}")
    colour, kind = target_name.split(" ", 1)
    names = {o.name for o in scene.objects}
    if how == "same_colour":
        options = [(colour, k) for k in KINDS if k != kind and f"{colour} {k}" not in names]
    else:
        options = [(c, kind) for c in COLOURS if c != colour and f"{c} {kind}" not in names]
    position = _free_place(scene, rng)
    if not options or position is None:
        return None
    c, k = options[int(rng.integers(len(options)))]
    obj = SceneObject(c, k, position)
    scene.objects.append(obj)
    return obj


def absent_name(scene: Scene, rng: np.random.Generator) -> str:
    """A name of no object in ``scene``: an object's colour with another kind when there is one."""
    names = {o.name for o in scene.objects}
    confusable = sorted({f"{o.colour} {k}" for o in scene.objects for k in KINDS} - names)
    anything = sorted({f"{c} {k}" for c in COLOURS for k in KINDS} - names)
    options = confusable or anything
    return options[int(rng.integers(len(options)))]
