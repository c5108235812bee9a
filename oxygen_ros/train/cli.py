"""``oxygen-train-demo``: train the demo policy on the simulator's scripted expert and write its checkpoint."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from .recipes import ALIASES, ENVS, OUT_DIRS, recipe, sources


def env_name(value: str) -> str:
    """--env's value; the older spelling is taken, with a note naming the current one."""
    if value in ALIASES:
        print(f"oxygen-train-demo: note: --env {value} is now spelled {ALIASES[value]}", file=sys.stderr)
        return ALIASES[value]
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--env", type=env_name, choices=ENVS, default=ENVS[0])
    env = pre.parse_known_args(argv)[0].env
    d = recipe(env)
    p = argparse.ArgumentParser(
        prog="oxygen-train-demo",
        description="Train a demo pi0.5-structured policy on a simulator's scripted expert (episodes generated "
        "on the fly, seeds >= 1000000) and write the checkpoint, tokenizer, norm stats and loss curves. "
        "The defaults are the recipe of the committed checkpoint of --env.",
    )
    p.add_argument("--env", type=lambda v: ALIASES.get(v, v), choices=ENVS, default=ENVS[0],
                   help="tabletop (also spelled table_top): the package's own pick task (models/demo); aloha_transfer_cube: the MuJoCo "
                   "ALOHA's cube hand-over in openpi's ALOHA layout (models/aloha) (default %(default)s)")
    p.add_argument("--steps", type=int, default=d.steps, help="optimizer steps (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of initialization, batches, noise and flow times (default %(default)s)")
    p.add_argument("--out", default=OUT_DIRS[env], help="checkpoint folder (default %(default)s)")
    p.add_argument("--samples", type=int, default=d.samples, help="expert samples to generate (default %(default)s)")
    p.add_argument("--data-workers", type=int, default=d.data_workers, help="processes generating them (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="samples per optimizer step (default %(default)s)")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate, after the warm-up, then cosine decay (default %(default)s)")
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help="linear warm-up steps of the learning rate (default %(default)s)")
    p.add_argument("--flow-weight", type=float, default=d.flow_weight, help="weight of the flow-matching (action) loss (default %(default)s)")
    p.add_argument("--text-weight", type=float, default=d.text_weight, help="weight of the text tasks' next-token loss (default %(default)s)")
    p.add_argument("--grounding-weight", type=float, default=d.grounding_weight,
                   help="weight of the grounding loss: a training-only head points at the named object in every "
                   "camera image (0 = off; default %(default)s)")
    p.add_argument("--recognition-weight", type=float, default=d.recognition_weight,
                   help="weight of the recognition loss: a training-only head names the object each image patch shows "
                   "(0 = off; default %(default)s)")
    p.add_argument("--recognition-layer", type=int, default=d.recognition_layer,
                   help="backbone layer whose patch tokens the recognition head reads (-1: the image features "
                   "entering the backbone; default %(default)s)")
    p.add_argument("--pointing-weight", type=float, default=d.pointing_weight,
                   help="weight of the pointing loss: a text task's attention looks at the objects its text is about, "
                   "the question's and the answer's, the memory note's neighbour (0 = off; default %(default)s)")
    p.add_argument("--pointing-layers", type=int, nargs=2, metavar=("FIRST", "SECOND"), default=d.pointing_layers or None,
                   help="backbone layer of each read of the pointing loss: the text's own object, then the one it names "
                   "(-1: that read off; default: the middle layer, then the last)")
    p.add_argument("--prompt-dropout", type=float, default=d.prompt_dropout,
                   help="BPE-dropout of the training prompts: each merge skipped with this probability, so words typed "
                   "in ways the data never show whole still reach the model in learned pieces (0 = off; default %(default)s)")
    p.add_argument("--fold-case", action=argparse.BooleanOptionalAction, default=d.fold_case,
                   help="an uncased tokenizer: capitals read and train as lower case (default: on)")
    p.add_argument("--flow-samples", type=int, default=d.flow_samples,
                   help="flow-matching noise draws per sample, sharing one prefix forward (default %(default)s)")
    p.add_argument("--ema-decay", type=float, default=d.ema_decay,
                   help="save a moving average of the weights with this decay; 0 = the last weights (default %(default)s)")
    p.add_argument("--preset", default=d.preset, help="model preset (default %(default)s)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default=d.dtype, help="dtype of the stored weights (default %(default)s)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch CPU threads (0 = torch's default; default %(default)s)")
    p.add_argument("--save-every", type=int, default=0, help="also write the checkpoint every N steps (0 = at the end)")
    p.add_argument("--absolute-actions", action=argparse.BooleanOptionalAction, default=not d.delta_actions,
                   help="train on absolute joint targets; --no-absolute-actions: joints relative to the state (the "
                   "environment's relative dims: all but the gripper, or the arms' for ALOHA; default: %(default)s)")
    p.add_argument("--dagger-rounds", type=int, default=d.dagger_rounds,
                   help="rounds of on-policy episodes labelled by the expert after --steps (0 = behaviour cloning only; default %(default)s)")
    p.add_argument("--dagger-episodes", type=int, default=d.dagger_episodes, help="policy episodes per round (default %(default)s)")
    p.add_argument("--dagger-samples", type=int, default=d.dagger_fresh_samples, help="new expert samples per round (default %(default)s)")
    p.add_argument("--dagger-steps", type=int, default=d.dagger_steps, help="optimizer steps per round (default %(default)s)")
    p.add_argument("--dagger-lr", type=float, default=d.dagger_lr, help="peak learning rate of a round (default %(default)s)")
    p.add_argument("--variations", action=argparse.BooleanOptionalAction, default=d.variations,
                   help="data as users bring it: instructions as people type them, lighting within 20 %%, distractors, "
                   "absent objects, and questions about the scene (the ask path) as a fourth text task (default: on; --no-variations: the plain templates and scenes only)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not 0 <= args.prompt_dropout < 1:
        print("oxygen-train-demo: --prompt-dropout must be in [0, 1)", file=sys.stderr)
        return 2
    if min(args.grounding_weight, args.recognition_weight, args.pointing_weight) < 0:
        print("oxygen-train-demo: --grounding-weight, --recognition-weight and --pointing-weight must not be negative",
              file=sys.stderr)
        return 2
    if min(args.steps, args.samples, args.batch_size, args.flow_samples) < 1:
        print("oxygen-train-demo: --steps, --samples, --batch-size and --flow-samples must be positive", file=sys.stderr)
        return 2
    if min(args.dagger_rounds, args.dagger_episodes, args.dagger_samples, args.dagger_steps) < 0:
        print("oxygen-train-demo: the --dagger-* counts must not be negative", file=sys.stderr)
        return 2
    from .trainer import summary, train  # torch: after the command line is read (--help stays instant)

    d = recipe(args.env)
    cfg = replace(
        d, steps=args.steps, seed=args.seed, samples=args.samples, data_workers=args.data_workers, batch_size=args.batch_size, lr=args.lr,
        warmup_steps=min(args.warmup_steps, args.steps), flow_weight=args.flow_weight, text_weight=args.text_weight, grounding_weight=args.grounding_weight,
        recognition_weight=args.recognition_weight, recognition_layer=args.recognition_layer, pointing_weight=args.pointing_weight, pointing_layers=tuple(args.pointing_layers or ()), prompt_dropout=args.prompt_dropout, fold_case=args.fold_case, flow_samples=args.flow_samples, ema_decay=args.ema_decay,
        preset=args.preset, dtype=args.dtype, threads=args.threads, save_every=args.save_every, delta_actions=not args.absolute_actions,
        dagger_rounds=args.dagger_rounds, dagger_episodes=args.dagger_episodes, dagger_fresh_samples=args.dagger_samples,
        dagger_steps=args.dagger_steps, dagger_lr=args.dagger_lr, variations=args.variations,
    )
    source, on_policy, vocabulary = sources(args.env, cfg.variations)
    result = train(cfg, source, args.out, vocabulary, progress=not args.no_progress, on_policy=on_policy)
    report = {k: v for k, v in summary(cfg, result).items() if k not in ("config", "tasks")}
    print(json.dumps({"out": str(result.out_dir), **report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
