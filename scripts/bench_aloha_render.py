"""What the MuJoCo ALOHA costs on this machine: one camera frame per size and quality, one 20 ms physics step.

    .venv/bin/python scripts/bench_aloha_render.py [--frames 10] [--steps 400]

Prints one JSON line: ms per frame of each camera size at full quality (the scene's 4096 shadow map and 4x
anti-aliasing) and with ``fast_render`` (neither), and ms per physics step.
"""

from __future__ import annotations

import argparse
import json
import time

from oxygen_ros.sim.aloha.env import AlohaEnv

SIZES = ((224, 224), (240, 320), (480, 640))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    out: dict[str, float] = {}
    for fast in (False, True):
        env = AlohaEnv(fast_render=fast)
        env.reset(0)
        env.images(64, 64, ("cam_high",))  # the renderer's context is made on the first frame
        for height, width in SIZES:
            started = time.perf_counter()
            for _ in range(args.frames):
                env.images(height, width)
            per_frame = (time.perf_counter() - started) / (3 * args.frames)
            out[f"{'fast' if fast else 'full'}_{width}x{height}_ms_per_frame"] = round(per_frame * 1e3, 1)
    env = AlohaEnv()
    state = env.reset(0)
    started = time.perf_counter()
    for _ in range(args.steps):
        env.step(state)
    out["physics_ms_per_step"] = round((time.perf_counter() - started) / args.steps * 1e3, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
