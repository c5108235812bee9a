"""Image preprocessing: aspect-preserving resize with black padding, [-1, 1] scaling, image slots."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oxygen_ros.model.network.config import TINY
from oxygen_ros.model.network.preprocess import ImageError, image_to_tensor, prepare_images, resize_with_pad


def solid(h: int, w: int, rgb: tuple[int, int, int]) -> np.ndarray:
    img = np.empty((h, w, 3), dtype=np.uint8)
    img[:] = rgb
    return img


def test_wide_image_is_padded_top_and_bottom() -> None:
    # 30x112 -> ratio 2 -> 15x56 content; 41 rows of padding split 20 above, 21 below (odd one at the bottom).
    out = resize_with_pad(solid(30, 112, (200, 100, 50)), 56)
    assert out.shape == (56, 56, 3) and out.dtype == np.uint8
    assert np.all(out[:20] == 0) and np.all(out[35:] == 0)
    assert np.all(out[20:35] == np.array([200, 100, 50], dtype=np.uint8))


def test_tall_image_is_padded_left_and_right() -> None:
    # 112x28 -> 56x14 content; 42 columns of padding, 21 each side.
    out = resize_with_pad(solid(112, 28, (10, 20, 30)), 56)
    assert np.all(out[:, :21] == 0) and np.all(out[:, 35:] == 0)
    assert np.all(out[:, 21:35] == np.array([10, 20, 30], dtype=np.uint8))


def test_resize_keeps_content_layout() -> None:
    # Left half red, right half blue, 60x120 -> 28x56 content (rows 14..41).
    img = np.zeros((60, 120, 3), dtype=np.uint8)
    img[:, :60] = (255, 0, 0)
    img[:, 60:] = (0, 0, 255)
    out = resize_with_pad(img, 56)
    content = out[14:42]
    assert np.all(content[:, :27] == (255, 0, 0))
    assert np.all(content[:, 29:] == (0, 0, 255))
    assert np.all(out[:14] == 0) and np.all(out[42:] == 0)


def test_upscale_and_identity() -> None:
    up = resize_with_pad(solid(7, 14, (9, 9, 9)), 56)  # ratio 0.25 -> 28x56
    assert np.all(up[14:42] == 9) and np.all(up[:14] == 0) and np.all(up[42:] == 0)
    rng = np.random.default_rng(0)
    square = rng.integers(0, 256, size=(56, 56, 3), dtype=np.uint8)
    same = resize_with_pad(square, 56)
    assert np.array_equal(same, square) and same is not square


def test_image_to_tensor_scales_to_unit_range() -> None:
    img = np.zeros((4, 5, 3), dtype=np.uint8)
    img[..., 0] = 255  # red channel full
    img[0, 0] = (0, 51, 102)
    t = image_to_tensor(img)
    assert t.shape == (3, 4, 5) and t.dtype == torch.float32
    assert t[0, 1, 1] == 1.0 and t[1, 1, 1] == -1.0
    assert torch.allclose(t[:, 0, 0], torch.tensor([-1.0, 51 / 255 * 2 - 1, 102 / 255 * 2 - 1]))


def test_prepare_images_masks_missing_cameras() -> None:
    base = solid(48, 64, (255, 255, 255))
    pixels, mask = prepare_images([base, None], TINY)
    size = TINY.vision.image_size
    assert pixels.shape == (TINY.num_image_slots, 3, size, size) and pixels.dtype == torch.float32
    assert mask.tolist() == [True, False, False] and mask.dtype == torch.bool
    # Missing slots are black images (-1), like openpi's zero uint8 images.
    assert torch.all(pixels[1:] == -1.0)
    # 48x64 -> 42x56 content, rows 7..48 white (1.0); padding rows black (-1.0).
    assert torch.all(pixels[0, :, 7:49] == 1.0)
    assert torch.all(pixels[0, :, :7] == -1.0) and torch.all(pixels[0, :, 49:] == -1.0)


def test_prepare_images_validation() -> None:
    ok = solid(8, 8, (1, 2, 3))
    with pytest.raises(ImageError, match=r"images\[1\]: expected dtype uint8, got float32"):
        prepare_images([ok, ok.astype(np.float32)], TINY)
    with pytest.raises(ImageError, match=r"images\[0\]: expected shape HxWx3, got \(8, 8\)"):
        prepare_images([ok[..., 0]], TINY)
    with pytest.raises(ImageError, match=r"expected 3 colour channels \(RGB\), got 4"):
        prepare_images([np.zeros((8, 8, 4), dtype=np.uint8)], TINY)
    with pytest.raises(ImageError, match="expected a numpy array"):
        prepare_images([[[1, 2, 3]]], TINY)  # type: ignore[list-item]
    with pytest.raises(ImageError, match="4 camera images but the model has 3 image slots"):
        prepare_images([ok] * 4, TINY)
    with pytest.raises(ImageError, match="all 3 image slots are missing"):
        prepare_images([None, None], TINY)
    with pytest.raises(ImageError, match="image is empty"):
        resize_with_pad(np.zeros((0, 8, 3), dtype=np.uint8), 56)
    with pytest.raises(ImageError, match="sequence"):
        prepare_images(ok, TINY)  # type: ignore[arg-type]
