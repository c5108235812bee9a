"""Action error of bfloat16 against float32, without and with the references' float32 islands.

    .venv/bin/python scripts/bf16_error.py --preset bench --frames 4

Builds one random model of the preset (every norm weight random too, so rounding 1 + w matters as it does in
trained weights), runs the same frames (random images, prompt, noise) in float32, in plain bfloat16 and in
bfloat16 with openpi's and LeRobot's float32 islands (``oxygen_ros.model.network.precision``), and prints the max and
mean absolute difference of the normalized action chunks against float32.
"""

from __future__ import annotations

import argparse
import copy

import torch

from oxygen_ros.model.network.config import preset
from oxygen_ros.model.network.layers import AdaRMSNorm, RMSNorm
from oxygen_ros.model.network.precision import cast_for_inference
from oxygen_ros.model.network.vla import Pi05Model


def random_model(name: str, seed: int) -> Pi05Model:
    torch.manual_seed(seed)
    model = Pi05Model(preset(name).replace(prefix_attention="bidirectional")).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, RMSNorm):
                module.weight.normal_(0.0, 0.3)
            elif isinstance(module, AdaRMSNorm):
                module.dense.weight.normal_(0.0, 0.02)
                module.dense.bias.normal_(0.0, 0.3)
    return model


def actions(model: Pi05Model, frame: dict[str, torch.Tensor]) -> torch.Tensor:
    cfg = model.config
    b = cfg.backbone
    shape = (b.depth, cfg.max_prefix_tokens, b.num_kv_heads, b.head_dim)
    k = torch.zeros(shape, dtype=model.dtype)
    v = torch.zeros_like(k)
    out = model.prefill(frame["images"].to(model.dtype), frame["mask"], frame["tokens"], k, v)
    return model.sample_actions(k[:, : out.length], v[:, : out.length], frame["noise"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="bench")
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    reference = random_model(args.preset, args.seed)
    cfg = reference.config
    gen = torch.Generator().manual_seed(args.seed + 1)
    size = cfg.vision.image_size
    frames = [
        {
            "images": torch.rand(cfg.num_image_slots, 3, size, size, generator=gen) * 2 - 1,
            "mask": torch.tensor([True] * (cfg.num_image_slots - 1) + [False]),
            "tokens": torch.randint(3, cfg.vocab_size, (40,), generator=gen),
            "noise": torch.randn(cfg.action_horizon, cfg.action_dim, generator=gen),
        }
        for _ in range(args.frames)
    ]
    want = [actions(reference, f) for f in frames]
    print(f"preset {args.preset}, {args.frames} frames, chunk {cfg.action_horizon}x{cfg.action_dim}, torch {torch.__version__}")
    print(f"float32 action magnitude: mean |a| = {torch.stack(want).abs().mean():.4f}")
    for style in ("none", "openpi", "lerobot"):
        model = cast_for_inference(copy.deepcopy(reference), torch.bfloat16, style)  # type: ignore[arg-type]
        err = torch.stack([(actions(model, f) - w).abs() for f, w in zip(frames, want)])
        label = "bf16, no float32 islands (before)" if style == "none" else f"bf16, {style} float32 islands"
        print(f"{label:38s} max |err| = {err.max():.5f}   mean |err| = {err.mean():.5f}")


if __name__ == "__main__":
    main()
