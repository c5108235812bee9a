"""Camera images to model input: resize with black padding, scale to [-1, 1], fill the image slots.

Follows openpi: `resize_with_pad` keeps the aspect ratio (the longer side becomes `size`, sizes truncated to
int), resizes bilinearly with antialiasing (as `jax.image.resize`, which openpi's input transform uses, does
when shrinking), rounds back to uint8 and pads evenly with black (the odd pixel goes to the bottom/right).
Pixel values map to [-1, 1] as x / 255 * 2 - 1.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .config import ModelConfig


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


def resize_with_pad(image: np.ndarray, size: int) -> np.ndarray:
    """Resize an HxWx3 uint8 image into `size`x`size` keeping its aspect ratio; pad with black."""
    image = check_image(image)
    if size <= 0:
        raise ImageError(f"resize target size must be positive, got {size}")
    height, width = image.shape[:2]
    if (height, width) == (size, size):
        return image.copy()
    ratio = max(width / size, height / size)
    new_h = max(1, int(height / ratio))
    new_w = max(1, int(width / ratio))
    # HWC uint8 -> 1xCxHxW float for interpolate, then back with rounding.
    x = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].to(torch.float32)
    if (new_h, new_w) != (height, width):
        x = F.interpolate(x, size=(new_h, new_w), mode="bilinear", align_corners=False, antialias=True)
    resized = x.round().clamp(0, 255).to(torch.uint8)[0].permute(1, 2, 0).numpy()
    out = np.zeros((size, size, 3), dtype=np.uint8)
    top = (size - new_h) // 2
    left = (size - new_w) // 2
    out[top : top + new_h, left : left + new_w] = resized
    return out


def image_to_tensor(image: np.ndarray) -> torch.Tensor:
    """HxWx3 uint8 -> float32 tensor 3xHxW with values in [-1, 1]."""
    image = check_image(image)
    # torch.from_numpy needs a writable array; bag readers hand out read-only ones.
    x = torch.from_numpy(np.array(image, copy=not image.flags.writeable or not image.flags.c_contiguous)).permute(2, 0, 1).to(torch.float32)
    return x / 255.0 * 2.0 - 1.0


def prepare_images(images: Sequence[np.ndarray | None], config: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Fill the model's image slots from camera images in slot order (pi0.5: base, left wrist, right wrist).

    `None`, or a slot beyond the end of `images`, is a missing camera: a black image (-1 everywhere, what
    openpi feeds for one) whose slot is masked out. Returns (float32 [num_image_slots, 3, S, S],
    bool [num_image_slots]) with S = config.vision.image_size.
    """
    slots = config.num_image_slots
    size = config.vision.image_size
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
        pixels[i] = image_to_tensor(resize_with_pad(image, size))
        mask[i] = True
    if not bool(mask.any()):
        raise ImageError(f"no camera image given: all {slots} image slots are missing")
    return pixels, mask
