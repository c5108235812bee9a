"""Camera images to model input: resize with black padding, scale to [-1, 1], fill the image slots.

Both references keep the aspect ratio (the longer side becomes `size`, sizes truncated to int) and pad evenly
with black (the odd pixel goes to the bottom/right), but they resize differently, and a checkpoint should see
the pixels it was trained on (``resize_mode``):

* ``pil`` (openpi): the openpi client's ``image_tools.resize_with_pad`` resizes the uint8 image with PIL's
  bilinear filter (antialiased when shrinking) before sending it; pixels then map to [-1, 1] as x/255*2-1.
* ``bilinear`` (LeRobot): ``resize_with_pad_torch`` on the float image x/255 in [0, 1] with
  ``F.interpolate(mode="bilinear", align_corners=False)`` (no antialiasing), clamped to [0, 1], padded with
  0.0, then mapped to [-1, 1] as x*2-1; no rounding back to uint8.
"""

from __future__ import annotations

from typing import Literal, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from oxygen_ros.model.network.choices import RESIZE_MODES
from oxygen_ros.model.network.config import ModelConfig

ResizeMode = Literal["pil", "bilinear"]


class ImageError(ValueError):
    """An image has the wrong type, dtype or shape, or the camera list does not fit the model."""


def check_image(image: object, where: str = "image") -> np.ndarray:
    """Return `image` as an HxWx3 uint8 array or raise `ImageError` saying what is wrong with it."""
    if not isinstance(image, np.ndarray):
        raise ImageError(f"{where}: expected a numpy array (HxWx3 uint8), got {type(image).__name__}")
    if image.dtype != np.uint8:
        raise ImageError(f"{where}: expected dtype uint8, got {image.dtype}")
    if image.ndim != 3:
        raise ImageError(f"{where}: expected shape HxWx3, got {image.shape} (convert grayscale to RGB first)")
    if image.shape[2] != 3:
        raise ImageError(f"{where}: expected 3 colour channels (RGB), got {image.shape[2]} in shape {image.shape}")
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise ImageError(f"{where}: image is empty, shape {image.shape}")
    return image


def _fit(height: int, width: int, size: int) -> tuple[int, int]:
    ratio = max(width / size, height / size)
    return max(1, int(height / ratio)), max(1, int(width / ratio))


def resize_with_pad(image: np.ndarray, size: int) -> np.ndarray:
    """openpi's client resize: HxWx3 uint8 into `size`x`size` with PIL bilinear, keeping the aspect ratio; black padding."""
    image = check_image(image)
    if size <= 0:
        raise ImageError(f"resize target size must be positive, got {size}")
    height, width = image.shape[:2]
    if (height, width) == (size, size):
        return image.copy()
    new_h, new_w = _fit(height, width, size)
    resized = np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize((new_w, new_h), resample=Image.BILINEAR))
    out = np.zeros((size, size, 3), dtype=np.uint8)
    top = (size - new_h) // 2
    left = (size - new_w) // 2
    out[top : top + new_h, left : left + new_w] = resized
    return out


def resize_with_pad_bilinear(image: np.ndarray, size: int) -> torch.Tensor:
    """LeRobot's resize: HxWx3 uint8 → float32 3x`size`x`size` in [-1, 1] (bilinear on x/255, no antialiasing)."""
    image = check_image(image)
    if size <= 0:
        raise ImageError(f"resize target size must be positive, got {size}")
    x = torch.from_numpy(np.array(image, dtype=np.float32)).permute(2, 0, 1)[None] / 255.0
    height, width = image.shape[:2]
    if (height, width) != (size, size):
        new_h, new_w = _fit(height, width, size)
        x = F.interpolate(x, size=(new_h, new_w), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
        top, left = (size - new_h) // 2, (size - new_w) // 2
        x = F.pad(x, (left, size - new_w - left, top, size - new_h - top), value=0.0)
    return x[0] * 2.0 - 1.0


def image_to_tensor(image: np.ndarray) -> torch.Tensor:
    """HxWx3 uint8 -> float32 tensor 3xHxW with values in [-1, 1]."""
    image = check_image(image)
    # torch.from_numpy needs a writable array; bag readers hand out read-only ones.
    x = torch.from_numpy(np.array(image, copy=not image.flags.writeable or not image.flags.c_contiguous)).permute(2, 0, 1).to(torch.float32)
    return x / 255.0 * 2.0 - 1.0


def prepare_images(
    images: Sequence[np.ndarray | None], config: ModelConfig, resize_mode: ResizeMode = "pil"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fill the model's image slots from camera images in slot order (pi0.5: base, left wrist, right wrist).

    ``resize_mode`` picks the reference's resize (see the module doc). `None`, or a slot beyond the end of
    `images`, is a missing camera: a black image (-1 everywhere, what
    openpi feeds for one) whose slot is masked out. Returns (float32 [num_image_slots, 3, S, S],
    bool [num_image_slots]) with S = config.vision.image_size.
    """
    slots = config.num_image_slots
    size = config.vision.image_size
    if resize_mode not in RESIZE_MODES:
        raise ImageError(f"unknown resize_mode {resize_mode!r}; choose one of {list(RESIZE_MODES)}")
    if isinstance(images, np.ndarray) or not isinstance(images, Sequence):
        raise ImageError(f"images must be a sequence of HxWx3 uint8 arrays or None, got {type(images).__name__}")
    if len(images) > slots:
        raise ImageError(f"got {len(images)} camera images but the model has {slots} image slots")
    pixels = torch.full((slots, 3, size, size), -1.0, dtype=torch.float32)
    mask = torch.zeros(slots, dtype=torch.bool)
    for i, image in enumerate(images):
        if image is None:
            continue
        check_image(image, where=f"images[{i}]")
        if resize_mode == "pil":
            pixels[i] = image_to_tensor(resize_with_pad(image, size))
        else:
            pixels[i] = resize_with_pad_bilinear(image, size)
        mask[i] = True
    if not bool(mask.any()):
        raise ImageError(f"no camera image given: all {slots} image slots are missing")
    return pixels, mask
