"""Camera images of the scene, drawn with numpy and Pillow: a fixed base camera and a wrist camera.

Pinhole cameras, flat shading, painter's order (far things first), shadows straight below the fingertips
and the objects (a height cue), and 2x supersampling so sub-pixel motion still changes the image. The
object positions reach a policy only through these images; the robot state is the joint positions.
"""

from __future__ import annotations

import math
import numpy as np
from PIL import Image, ImageDraw

from .scene import KIND_SIZE, Scene, forward_kinematics

CAMERA_NAMES = ("base", "wrist")
SUPERSAMPLE = 2

RGB = {
    "red": (205, 45, 40), "blue": (45, 80, 210), "green": (40, 165, 70), "yellow": (225, 200, 40),
    "background": (58, 62, 72), "table": (176, 150, 112), "shadow": (120, 102, 76),
    "arm": (150, 152, 160), "joint": (95, 97, 105), "finger": (40, 40, 44),
}  # fmt: skip
TABLE = np.array([[-0.05, -0.6, 0.0], [0.75, -0.6, 0.0], [0.75, 0.6, 0.0], [-0.05, 0.6, 0.0]])


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


class Camera:
    """A pinhole camera at ``eye`` looking along ``forward``, ``up`` roughly the image's up."""

    def __init__(self, eye: np.ndarray, forward: np.ndarray, up: np.ndarray, fov_deg: float) -> None:
        self.eye = np.asarray(eye, dtype=np.float64)
        f = np.asarray(forward, dtype=np.float64)
        f = f / np.linalg.norm(f)
        right = _cross(f, np.asarray(up, dtype=np.float64))
        right /= np.linalg.norm(right)
        self.axes = np.stack([right, -_cross(right, f), f], axis=1)  # world → (right, down, forward)
        self.tan_half = math.tan(math.radians(fov_deg) / 2)

    def focal(self, size: int) -> float:
        return 0.5 * size / self.tan_half

    def project(self, points: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        """World points [N, 3] → pixel coordinates [N, 2] and depths [N] (image of ``size`` pixels)."""
        cam = (np.atleast_2d(points) - self.eye) @ self.axes
        depth = cam[:, 2]
        uv = cam[:, :2] / np.maximum(depth, 1e-4)[:, None] * self.focal(size) + size / 2
        return uv, depth


# Looks down on the table from high above the places (nearly orthographic), shifted half a place column so
# that at 64 x 64 pixels every one of the six places fills the middle of its own 16 x 16 patch (rows 2-3,
# columns 1-3; the arm's base is at the top edge). An object never straddles two patches nor shares one with
# another object: where an object stands is one patch's colour, the easiest thing for a small ViT to find.
_BASE_EYE = np.array([0.30, -0.075, 1.45])
BASE_CAMERA = Camera(_BASE_EYE, np.array([0.20, -0.075, 0.0]) - _BASE_EYE, np.array([0.0, 0.0, 1.0]), 24.0)


def wrist_camera(q: np.ndarray) -> Camera:
    """Looks straight down the tool from the wrist; the image's up points away from the base."""
    _, wrist, _ = forward_kinematics(q)
    yaw = float(q[0])
    return Camera(wrist + np.array([0.0, 0.0, 0.01]), np.array([0.0, 0.0, -1.0]), np.array([math.cos(yaw), math.sin(yaw), 0.0]), 75.0)


def _hull(points: np.ndarray) -> list[tuple[float, float]]:
    """Convex hull of 2-D points (monotone chain), as a polygon for Pillow."""
    pts = sorted(set(map(tuple, np.round(points, 2).tolist())))
    if len(pts) < 3:
        return [tuple(p) for p in pts]

    def half(seq: list) -> list:
        out: list = []
        for p in seq:
            while len(out) >= 2 and (out[-1][0] - out[-2][0]) * (p[1] - out[-2][1]) - (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0]) <= 0:
                out.pop()
            out.append(p)
        return out

    lower, upper = half(pts), half(pts[::-1])
    return lower[:-1] + upper[:-1]


_RING = {n: np.stack([np.cos(a), np.sin(a), np.zeros(n)], axis=1) for n in (12, 16) for a in [np.linspace(0, 2 * math.pi, n, endpoint=False)]}


def _circle(centre: np.ndarray, radius: float, z: float, n: int = 16) -> np.ndarray:
    return _RING[n] * radius + np.array([centre[0], centre[1], z])


def _shade(rgb: tuple[int, int, int], k: float) -> tuple[int, int, int]:
    return tuple(int(min(255, c * k)) for c in rgb)  # type: ignore[return-value]


class _Canvas:
    def __init__(self, camera: Camera, size: int) -> None:
        self.camera, self.size = camera, size * SUPERSAMPLE
        self.image = Image.new("RGB", (self.size, self.size), RGB["background"])
        self.draw = ImageDraw.Draw(self.image)
        self.items: list[tuple[float, int, object]] = []  # (depth, order, drawing function)

    def project(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.camera.project(points, self.size)

    def polygon_now(self, points: np.ndarray, rgb: tuple[int, int, int]) -> None:
        uv, depth = self.project(points)
        if np.all(depth > 1e-3):
            self.draw.polygon(_hull(uv), fill=rgb)

    def later(self, depth: float, fn) -> None:  # noqa: ANN001
        self.items.append((depth, len(self.items), fn))

    def finish(self, size: int) -> np.ndarray:
        for _, _, fn in sorted(self.items, key=lambda t: (-t[0], t[1])):
            fn()
        return np.asarray(self.image.resize((size, size), Image.Resampling.BOX), dtype=np.uint8)


def _draw_object(c: _Canvas, obj, highlight: float = 1.0) -> None:  # noqa: ANN001
    rgb = RGB[obj.colour]
    p = obj.position
    w, h = KIND_SIZE[obj.kind]
    centre = p + np.array([0.0, 0.0, h / 2])
    _, depth = c.project(centre[None])
    if depth[0] <= 1e-3:
        return
    if obj.kind == "ball":
        def draw() -> None:
            uv, d = c.project(centre[None])
            r = c.camera.focal(c.size) * (w / 2) / d[0]
            x, y = uv[0]
            c.draw.ellipse([x - r, y - r, x + r, y + r], fill=rgb)
            c.draw.ellipse([x - r * 0.45, y - r * 0.65, x + r * 0.05, y - r * 0.15], fill=_shade(rgb, 1.35))
    elif obj.kind == "cup":
        def draw() -> None:
            body = np.concatenate([_circle(p, w / 2, p[2]), _circle(p, w / 2 * 1.1, p[2] + h)])
            c.polygon_now(body, rgb)
            c.polygon_now(_circle(p, w / 2 * 1.1, p[2] + h), rgb)  # the rim: the cup's colour seen from above
            c.polygon_now(_circle(p, w / 2 * 0.8, p[2] + h), _shade(rgb, 0.6))
    else:
        def draw() -> None:
            s = w / 2
            corners = np.array([[dx, dy, dz] for dx in (-s, s) for dy in (-s, s) for dz in (0.0, h)]) + p
            c.polygon_now(corners, _shade(rgb, 0.8))
            top = np.array([[-s, -s, h], [s, -s, h], [s, s, h], [-s, s, h]]) + p
            c.polygon_now(top, _shade(rgb, 1.1))
    c.later(float(depth[0]), draw)


def _draw_shadow(c: _Canvas, xy: np.ndarray, radius: float, darkness: float = 1.0) -> None:
    c.polygon_now(_circle(np.array([xy[0], xy[1], 0.0]), radius, 0.0005, 12), _shade(RGB["table"], 0.72 if darkness else 1))


def _finger_points(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top and bottom centres of the two fingers (they open sideways, across the arm)."""
    _, _, tip = forward_kinematics(q)
    yaw = float(q[0])
    side = np.array([-math.sin(yaw), math.cos(yaw), 0.0]) * (float(q[3]) / 2 + 0.006)
    top = np.array([0.0, 0.0, 0.05])
    return np.stack([tip + side + top, tip - side + top]), np.stack([tip + side, tip - side])


def _draw_arm(c: _Canvas, q: np.ndarray) -> None:
    elbow, wrist, tip = forward_kinematics(q)
    shoulder = np.array([0.0, 0.0, 0.22])
    tops, bottoms = _finger_points(q)
    palm = tip + np.array([0.0, 0.0, 0.05])
    segments = [
        (np.array([0.0, 0.0, 0.0]), shoulder, 0.05, RGB["joint"]),
        (shoulder, elbow, 0.035, RGB["arm"]),
        (elbow, wrist, 0.03, RGB["arm"]),
        (wrist, palm, 0.02, RGB["joint"]),
        (tops[0], bottoms[0], 0.008, RGB["finger"]),
        (tops[1], bottoms[1], 0.008, RGB["finger"]),
    ]
    focal = c.camera.focal(c.size)
    for a, b, thickness, rgb in segments:
        uv, depth = c.project(np.stack([a, b]))
        if np.any(depth <= 0.02):
            continue

        def draw(uv=uv, depth=depth, thickness=thickness, rgb=rgb) -> None:  # noqa: ANN001
            width = max(1, int(round(focal * thickness / float(depth.mean()))))
            c.draw.line([tuple(uv[0]), tuple(uv[1])], fill=rgb, width=width)
            r = width / 2
            for x, y in uv:
                c.draw.ellipse([x - r, y - r, x + r, y + r], fill=rgb)

        c.later(float(depth.mean()), draw)


def camera_of(scene: Scene, camera: str) -> Camera:
    """The ``camera`` ("base" or "wrist") as it is placed in ``scene`` (the wrist one moves with the arm)."""
    if camera == "base":
        return BASE_CAMERA
    if camera == "wrist":
        return wrist_camera(scene.q)
    raise ValueError(f"unknown camera {camera!r}; choose one of {CAMERA_NAMES}")


def render(scene: Scene, camera: str, size: int) -> np.ndarray:
    """An HxWx3 uint8 image of the scene from ``camera`` ("base" or "wrist")."""
    c = _Canvas(camera_of(scene, camera), size)
    c.polygon_now(TABLE, RGB["table"])
    tip = scene.tip
    _draw_shadow(c, tip[:2], 0.02)
    for obj in scene.objects:
        if obj.position[2] > 0.001:
            _draw_shadow(c, obj.position[:2], obj.width / 2)
        _draw_object(c, obj)
    _draw_arm(c, scene.q)
    return c.finish(size)


def view_fraction(scene: Scene, camera: str, point: np.ndarray) -> tuple[float, float] | None:
    """Where the world ``point`` [3] appears in ``camera``'s image of ``scene``, as fractions (u across, v down)
    of its width and height, the same at any image size; None when it lies outside the image or behind the
    camera (occlusion is not considered)."""
    uv, depth = camera_of(scene, camera).project(np.asarray(point, dtype=np.float64), 1)
    u, v = (float(x) for x in uv[0])
    return (u, v) if depth[0] > 0 and 0.0 <= u < 1.0 and 0.0 <= v < 1.0 else None


def render_views(scene: Scene, size: int) -> tuple[np.ndarray, ...]:
    """Both camera images in CAMERA_NAMES order (the policy's image slots 0 and 1)."""
    return tuple(render(scene, name, size) for name in CAMERA_NAMES)
