"""Training of the demo policy: losses fall, one seed gives one checkpoint, the checkpoint runs in the runtime,
and the training forward computes exactly what inference computes (prefix, text continuation, velocity)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from oxygen_ros.model.network.config import ModelConfig, TINY
from oxygen_ros.runtime.config import RuntimeConfig, default_tasks
from oxygen_ros.runtime.policy import PolicyRuntime
from oxygen_ros.train.batch import IGNORE, make_batch
from oxygen_ros.train.data import build_training_set, collect_samples, pixels_from_uint8
from oxygen_ros.train.forward import compute_losses, joint_forward
from oxygen_ros.train.trainer import TrainConfig, deterministic_kernels, prepare, train

from train_fixtures import COLOURS, KINDS, STATE_DIM, fake_expert_samples

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny_preset() -> ModelConfig:
    """The tiny model (random-weight preset of the other tests), causal prompt attention (OxyGen)."""
    return TINY


def small_config(model: ModelConfig, **changes: object) -> TrainConfig:
    base = TrainConfig(steps=3, samples=36, data_workers=2, batch_size=6, warmup_steps=2, model=model, threads=1, variations=False)
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize("workers", [1, 2])
def test_expert_samples_come_from_one_stream_per_worker_with_a_progress_bar(workers: int, capsys) -> None:  # noqa: ANN001
    got = collect_samples(fake_expert_samples, 3, 9, 4, 0.2, 16, workers=workers, progress=True)
    streams = [list(itertools.islice(fake_expert_samples(300 + w, 4, 0.2, 16), 9 // workers + (w < 9 % workers)))
               for w in range(workers)]  # fmt: skip
    expected = [s for stream in streams for s in stream]
    assert len(got) == 9 and all(np.array_equal(a.actions, b.actions) for a, b in zip(got, expected))
    assert "expert samples" in capsys.readouterr().err


@pytest.mark.parametrize("workers", [2, 3])
def test_preprocessing_in_worker_processes_gives_the_same_batches(tmp_path: Path, tiny_preset: ModelConfig, workers: int,
                                                                  capsys) -> None:  # noqa: ANN001
    cfg = small_config(tiny_preset, variations=True, pointing_weight=0.1)
    runtime, _, _ = prepare(cfg, fake_expert_samples, tmp_path)
    model = runtime.model_config
    samples = collect_samples(fake_expert_samples, 5, 23, model.action_horizon, 0.2, model.vision.image_size)
    options = dict(task_names=cfg.text_task_names(), delta_mask=cfg.delta_mask(model.action_dim), with_reads=True)
    one = build_training_set(samples, runtime, **options)
    threads = torch.get_num_threads()
    built: list = []
    try:  # the trainer forks with its OpenMP pool started: a worker that used it would wait forever
        torch.set_num_threads(2)
        (torch.randn(512, 512) @ torch.randn(512, 512)).sum()
        build = threading.Thread(target=lambda: built.append(
            build_training_set(samples, runtime, **options, workers=workers, progress=True)), daemon=True)
        build.start()
        build.join(timeout=120)
    finally:
        torch.set_num_threads(threads)
    assert built, "the preprocessing workers hung"
    parts = built[0]
    assert "preprocessing" in capsys.readouterr().err
    assert len(parts) == len(one) == 23
    index = torch.arange(23)
    a, b = (make_batch(d, index, model.tokens_per_image, model.pad_token_id, 2) for d in (one, parts))
    for name in ("images", "tokens", "labels", "kinds", "positions", "actions", "target_maps", "read_maps", "read_rows", "read_spans"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_a_gather_with_repeated_indices_has_one_gradient_under_the_deterministic_kernels() -> None:
    """The pointing loss's pattern (each sample's keys gathered once per look, then a product): its backward
    sums the repeats; the training loop runs it with the deterministic kernels, so one batch gives one
    gradient on two threads while a third keeps the cores busy."""
    gen = torch.Generator().manual_seed(0)
    keys = torch.randn(8, 120, 32, generator=gen, requires_grad=True)
    samples = torch.randint(8, (400,), generator=gen)  # about 50 looks per sample
    queries = torch.randn(400, 32, generator=gen)
    busy = threading.Event()

    def load() -> None:
        x = torch.randn(256, 256)
        while not busy.is_set():
            x = torch.tanh(x @ x)

    threads = torch.get_num_threads()
    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    grads = set()
    try:
        torch.set_num_threads(2)
        with deterministic_kernels():
            assert torch.are_deterministic_algorithms_enabled()
            for _ in range(20):
                keys.grad = None
                torch.einsum("nd,ntd->nt", queries, keys[samples]).logsumexp(-1).sum().backward()
                grads.add(keys.grad.numpy().tobytes())
        assert not torch.are_deterministic_algorithms_enabled()  # the caller's setting again
    finally:
        busy.set()
        worker.join()
        torch.set_num_threads(threads)
    assert len(grads) == 1


def test_a_few_steps_lower_both_losses(tmp_path: Path, tiny_preset: ModelConfig) -> None:
    result = train(small_config(tiny_preset, steps=30, lr=3e-3, warmup_steps=3, variations=True), fake_expert_samples,
                   tmp_path, progress=False)  # fmt: skip
    h = result.history
    for key in ("flow", "text"):
        first, last = np.mean(h[key][:3]), np.mean(h[key][-3:])
        assert last < 0.8 * first, f"{key} loss {first:.3f} -> {last:.3f}"
    assert (tmp_path / "losses.png").stat().st_size > 1000
    # Each task's own curve; on steps where every task had tokens, their mean is the text loss.
    curves = [h[f"text_{name}"] for name in small_config(tiny_preset, variations=True).text_task_names()]
    assert len(curves) == 4  # the three tasks and the questions
    assert all(len(c) == len(h["text"]) for c in curves)
    full = [i for i in range(len(h["text"])) if not any(np.isnan(c[i]) for c in curves)]
    assert full and all(abs(np.mean([c[i] for c in curves]) - h["text"][i]) < 1e-5 for i in full)
    final = json.loads((tmp_path / "train_summary.json").read_text())["final_losses"]
    assert {f"text_{t.name}" for t in small_config(tiny_preset).tasks} <= set(final)


def test_same_seed_same_checkpoint_other_seed_differs(tmp_path: Path, tiny_preset: ModelConfig) -> None:
    runs = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        result = train(small_config(tiny_preset, seed=seed), fake_expert_samples, tmp_path / name, progress=False)
        runs[name] = (result.history["total"], (tmp_path / name / "model.safetensors").read_bytes())
    assert runs["a"] == runs["b"]
    assert runs["a"][0] != runs["c"][0] and runs["a"][1] != runs["c"][1]


def test_checkpoint_runs_in_the_policy_runtime(tmp_path: Path, tiny_preset: ModelConfig) -> None:
    train(small_config(tiny_preset, dtype="bfloat16"), fake_expert_samples, tmp_path, progress=False)
    assert {"model.safetensors", "config.json", "tokenizer.model", "train_summary.json"} <= {p.name for p in tmp_path.iterdir()}
    assert (tmp_path / "assets" / "demo" / "norm_stats.json").exists()
    # Arm joints trained relative to the state, gripper absolute: recorded in the checkpoint, read by the runtime.
    mask = [True] * (STATE_DIM - 1) + [False]
    assert json.loads((tmp_path / "config.json").read_text())["delta_action_mask"] == mask
    runtime = PolicyRuntime.load(
        RuntimeConfig(checkpoint=str(tmp_path), tokenizer=str(tmp_path / "tokenizer.model"), tokens_per_frame=4)
    )
    sample = next(fake_expert_samples(5, 10, 0.2, 56))
    result = runtime.step(runtime.make_frame(list(sample.images), sample.state, sample.instruction, stamp_ns=1))
    assert result.actions.shape == (10, STATE_DIM) and np.all(np.isfinite(result.actions))
    assert runtime.delta_action_mask == tuple(mask)
    events = []
    for _ in range(10):
        events += runtime.decode()
    assert any(e.final for e in events)


@pytest.mark.parametrize("prefix_attention", ["causal_text", "bidirectional"])
def test_training_forward_equals_inference(tmp_path: Path, tiny_preset: ModelConfig, prefix_attention: str) -> None:
    """Velocity of the joint training pass == the model's uncached reference; text hidden states of each
    task == prefill + token-by-token extend from the cached prefix (two samples of different prompt lengths,
    so padding and masks are exercised), for OxyGen's causal prompt and openpi's bidirectional prefix."""
    model_config = dataclasses.replace(tiny_preset, prefix_attention=prefix_attention)
    runtime, data, _ = prepare(small_config(model_config, variations=True), fake_expert_samples, tmp_path)
    model = runtime.model
    cfg = model.config
    # Two samples whose prompts differ in length.
    lengths = torch.tensor([p.numel() for p in data.prompts])
    index = torch.tensor([int(lengths.argmin()), int(lengths.argmax())])
    assert lengths[index[0]] != lengths[index[1]]
    batch = make_batch(data, index, cfg.tokens_per_image, cfg.pad_token_id)
    gen = torch.Generator().manual_seed(0)
    x_t = torch.randn(batch.actions.shape, generator=gen)
    times = torch.tensor([0.3, 0.8])
    with torch.no_grad():
        hidden, velocity = joint_forward(model, batch, x_t, times)
    slots = data.image_slots
    assert data.question_task >= 0 and data.questions is not None
    index = torch.tensor([index[0], index[1], *[j for j, q in enumerate(data.questions) if q.numel()][:1]])
    batch = make_batch(data, index, cfg.tokens_per_image, cfg.pad_token_id)  # and one sample asked a question
    x_t = torch.randn(batch.actions.shape, generator=gen)
    times = torch.tensor([0.3, 0.8, 0.5])
    with torch.no_grad():
        hidden, velocity = joint_forward(model, batch, x_t, times)
    for row, i in enumerate(index.tolist()):
        images = torch.full((cfg.num_image_slots, 3, cfg.vision.image_size, cfg.vision.image_size), -1.0)
        images[slots] = pixels_from_uint8(data.pixels[data.image_index[i]])
        prompt = data.prompts[i]
        ref = model.joint_velocity(images, slots, prompt, x_t[row], float(times[row]))
        torch.testing.assert_close(velocity[row], ref, rtol=1e-4, atol=1e-4)
        at = max(data.prompts[j].numel() for j in index.tolist())
        for k, target in enumerate(data.texts[i]):
            if not target.numel():  # a sample without a question has no answer stream
                continue
            cont = data.continuation(i, k)
            stream = torch.cat((cont, target[:-1]))
            ref_hidden = _extend_hidden(model, images, slots, prompt, stream)
            torch.testing.assert_close(hidden[row, at : at + stream.numel()], ref_hidden, rtol=1e-4, atol=1e-4)
            labels = batch.labels[row, at : at + stream.numel()]
            assert labels[: cont.numel() - 1].eq(IGNORE).all() and torch.equal(labels[cont.numel() - 1 :], target)
            at += stream.numel()


def test_flow_samples_are_independent_groups_over_one_prefix(tmp_path: Path, tiny_preset: ModelConfig) -> None:
    """K noise draws in one joint pass: each group's velocity == the single-group pass on that draw (groups
    never see each other), and the text hidden states do not change."""
    runtime, data, _ = prepare(small_config(tiny_preset), fake_expert_samples, tmp_path)
    model, cfg = runtime.model, runtime.model.config
    index = torch.tensor([0, 3])
    single = make_batch(data, index, cfg.tokens_per_image, cfg.pad_token_id)
    grouped = make_batch(data, index, cfg.tokens_per_image, cfg.pad_token_id, flow_samples=3)
    h = cfg.action_horizon
    gen = torch.Generator().manual_seed(1)
    x_t = torch.randn(2, 3 * h, cfg.action_dim, generator=gen)
    times = torch.tensor([0.25, 0.9])
    with torch.no_grad():
        hidden_k, velocity_k = joint_forward(model, grouped, x_t, times)
        for g in range(3):
            hidden_1, velocity_1 = joint_forward(model, single, x_t[:, g * h : (g + 1) * h], times)
            torch.testing.assert_close(velocity_k[:, g * h : (g + 1) * h], velocity_1, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(hidden_k, hidden_1, rtol=1e-4, atol=1e-5)
    losses = compute_losses(model, grouped, torch.Generator().manual_seed(0))
    assert torch.isfinite(losses.flow) and losses.flow > 0
    with pytest.raises(ValueError, match="flow_samples"):
        make_batch(data, index, cfg.tokens_per_image, cfg.pad_token_id, flow_samples=0)


def _extend_hidden(model, images, slots, prompt, stream) -> torch.Tensor:
    """Inference path: prefill into a KV buffer, then feed ``stream`` one token at a time with ``extend``."""
    cfg = model.config
    b = cfg.backbone
    n = cfg.max_prefix_tokens + stream.numel()
    k = torch.zeros(b.depth, n, b.num_kv_heads, b.head_dim)
    v = torch.zeros_like(k)
    prefix = model.prefill(images, slots, prompt, k, v)
    out = []
    for j, token in enumerate(stream.tolist()):
        t = prefix.length + j
        plan = _Plan(torch.arange(t + 1)[None], torch.tensor([t + 1]), torch.tensor([[t]]), torch.tensor([[t]]))
        out.append(model.extend(torch.tensor([[token]]), plan, k, v)[0])
    return torch.stack(out)


@dataclasses.dataclass
class _Plan:
    ctx_index: torch.Tensor
    ctx_len: torch.Tensor
    write_index: torch.Tensor
    positions: torch.Tensor


def test_prompt_dropout_varies_only_the_prompt_segmentation(tmp_path: Path, tiny_preset: ModelConfig) -> None:
    """BPE-dropout gives the training prompts other segmentations of the same text; the text targets keep the
    canonical tokens the served model writes."""
    from oxygen_ros.train.data import build_training_set

    runtime, plain, _ = prepare(small_config(tiny_preset, prompt_dropout=0.0), fake_expert_samples, tmp_path)
    cfg = runtime.model_config
    samples = collect_samples(fake_expert_samples, 0, 36, cfg.action_horizon, 0.2, cfg.vision.image_size, workers=2)
    names = TrainConfig().text_task_names()[:3]
    dropped = build_training_set(samples, runtime, names, prompt_dropout=0.3, seed=1)
    again = build_training_set(samples, runtime, names, prompt_dropout=0.3, seed=1)
    canonical = build_training_set(samples, runtime, names)
    tok = runtime.tokenizer
    assert all(tok.decode(a.tolist()) == tok.decode(b.tolist()) for a, b in zip(dropped.prompts, canonical.prompts))
    assert sum(not torch.equal(a, b) for a, b in zip(dropped.prompts, canonical.prompts)) > len(samples) // 4
    assert all(torch.equal(a, b) for a, b in zip(dropped.prompts, again.prompts))  # one seed, one set
    assert all(torch.equal(a, b) for x, y in zip(dropped.texts, canonical.texts) for a, b in zip(x, y))
    assert plain.prompts[0].numel() > 0 and runtime.tokenizer is tok


def test_losses_are_finite_and_text_targets_cover_every_task(tmp_path: Path, tiny_preset: ModelConfig) -> None:
    runtime, data, _ = prepare(small_config(tiny_preset), fake_expert_samples, tmp_path)
    cfg = runtime.model.config
    batch = make_batch(data, torch.arange(4), cfg.tokens_per_image, cfg.pad_token_id)
    n_targets = sum(t.numel() for i in range(4) for t in data.texts[i])
    assert int((batch.labels != IGNORE).sum()) == n_targets
    losses = compute_losses(runtime.model, batch, torch.Generator().manual_seed(0))
    assert torch.isfinite(losses.total) and losses.flow > 0 and losses.text > 0


def test_training_prompts_match_the_demo_config() -> None:
    """Every task the demo serves is trained with the same continuation prompt (training adds localization)."""
    params = yaml.safe_load((REPO / "config" / "demo_policy.yaml").read_text())["/**"]["ros__parameters"]
    trained = {t.name: t.prompt for t in TrainConfig().tasks}
    served = dict(zip(params["task_names"], params["task_prompts"]))
    assert served == {t.name: t.prompt for t in default_tasks()}
    assert served.items() <= trained.items() and "location" in trained
    assert params.get("prompt_format", "pi05_state") == TrainConfig().prompt_format


def test_demo_preset_is_small() -> None:
    from oxygen_ros.model.network.config import preset
    from oxygen_ros.model.network.vla import Pi05Model, count_parameters

    with torch.device("meta"):
        model = Pi05Model(preset("demo"))
    assert isinstance(model.config, ModelConfig)
    assert count_parameters(model) * 4 < 20 * 1024 * 1024


def test_patch_positions_start_distinct_and_flow_times_follow_beta() -> None:
    from oxygen_ros.train.forward import sample_flow_time
    from oxygen_ros.train.trainer import sincos_2d

    codes = sincos_2d(8, 64)
    distances = torch.cdist(codes, codes) + torch.eye(64) * 1e9
    assert codes.shape == (64, 64) and float(distances.min()) > 0.1  # every patch place has its own code
    t = sample_flow_time(20_000, torch.Generator().manual_seed(0))
    assert 0.001 <= float(t.min()) and float(t.max()) <= 1.0
    # Beta(1.5, 1) has mean 0.6 (scaled by 0.999, shifted by 0.001)
    assert abs(float(t.mean()) - (0.6 * 0.999 + 0.001)) < 0.01


def test_delta_action_targets_invert_to_the_expert_chunk(tmp_path: Path, tiny_preset: ModelConfig) -> None:
    """Normalized targets, unnormalized and with the state added back on the masked dims as the runtime does,
    give the expert's absolute chunk again."""
    cfg = small_config(tiny_preset)
    runtime, data, _ = prepare(cfg, fake_expert_samples, tmp_path)
    sample = next(fake_expert_samples(cfg.seed * 100, 10, 0.2, 56))
    mask = np.array(cfg.delta_mask(STATE_DIM))
    restored = runtime.normalizer.unnormalize_actions(data.actions[0].numpy()) + np.where(mask, sample.state, 0.0)
    np.testing.assert_allclose(restored, sample.actions, atol=1e-4)


def test_the_weight_average_warms_up_then_follows_its_decay() -> None:
    """ema_model: the first update copies, then decay min(d, (1 + n) / (10 + n)) per update."""
    from oxygen_ros.train.trainer import ema_model

    model = torch.nn.Linear(1, 1, bias=False)
    ema = ema_model(model, 0.5)
    expected = None
    for n, value in enumerate([1.0, 3.0, -2.0, 5.0]):
        with torch.no_grad():
            model.weight.fill_(value)
        ema.update_parameters(model)
        d = min(0.5, (1.0 + n) / (10.0 + n))
        expected = value if expected is None else expected * d + value * (1.0 - d)
        assert float(ema.module.weight) == pytest.approx(expected)
    assert float(ema.module.weight) != float(model.weight)


def test_dagger_rounds_train_on_what_the_current_policy_reached(tmp_path: Path, tiny_preset: ModelConfig) -> None:
    seen: list[tuple[str, int, torch.Tensor]] = []

    @dataclasses.dataclass
    class Rollouts:
        samples: list
        episodes: int
        successes: int

    def on_policy(runtime: PolicyRuntime, seed: int, episodes: int, progress: bool, workers: int) -> Rollouts:
        seen.append((runtime.config.engine_mode, seed, runtime.model.action_out_proj.weight.detach().clone()))
        samples = list(itertools.islice(fake_expert_samples(seed, tiny_preset.action_horizon, 0.2, tiny_preset.vision.image_size), 8))
        return Rollouts(samples, episodes, 1)

    cfg = small_config(tiny_preset, dagger_rounds=2, dagger_episodes=3, dagger_fresh_samples=6, dagger_steps=4)
    result = train(cfg, fake_expert_samples, tmp_path, progress=False, on_policy=on_policy)
    assert len(result.history["total"]) == cfg.steps + 2 * cfg.dagger_steps
    assert [(mode, seed) for mode, seed, _ in seen] == [("action_only", 1), ("action_only", 2)]
    assert not torch.equal(seen[0][2], seen[1][2])  # round 2 rolled out the weights round 1 trained
    summary = json.loads((tmp_path / "train_summary.json").read_text())
    assert [r["on_policy_samples"] for r in summary["dagger_rounds"]] == [8, 8]
    assert [r["successes"] for r in summary["dagger_rounds"]] == [1, 1]
    # Without an on-policy source (or with no rounds) training is behaviour cloning alone.
    plain = train(dataclasses.replace(cfg, dagger_rounds=0), fake_expert_samples, tmp_path / "bc", progress=False, on_policy=on_policy)
    assert len(plain.history["total"]) == cfg.steps and len(seen) == 2


def test_loss_curves_average_over_the_steps_a_task_had_tokens() -> None:
    from oxygen_ros.train.plot import _smooth

    got = _smooth([1.0, float("nan"), 3.0, 5.0, float("nan"), float("nan")], 2)
    np.testing.assert_allclose(got[:4], [1.0, 3.0, 4.0, 5.0])
    assert np.isnan(got[4])


def test_target_map_spreads_each_view_point_over_its_nearest_patch_centres() -> None:
    from oxygen_ros.train.data import target_map

    square = np.zeros((64, 64, 3), np.uint8)

    def sample(uvs, image=square):  # noqa: ANN001, ANN202
        return dataclasses.replace(next(fake_expert_samples(1, 4, 0.2, 64)), images=(image, image), target_uvs=uvs)

    centres = (np.arange(4) + 0.5) / 4
    grid = np.stack(np.meshgrid(centres, centres, indexing="xy"), -1).reshape(16, 2)  # (u, v) per row-major patch
    maps = target_map(sample(((0.625, 0.375), (0.3, 0.7))), 4)
    assert maps.shape == (2, 16)
    assert maps[0].argmax() == 1 * 4 + 2 and float(maps[0].max()) == pytest.approx(1.0)  # a patch centre: one-hot
    np.testing.assert_allclose(maps.sum(-1), [1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(maps[1].numpy() @ grid, [0.3, 0.7], rtol=1e-6)  # the point itself, inside a patch
    border = target_map(sample(((0.01, 0.99), None)), 4)
    assert border[0, 12] == pytest.approx(1.0) and border[1].sum() == 0  # clamped to the corner; None: no target
    assert target_map(sample(()), 4).sum() == 0
    with pytest.raises(ValueError, match="outside"):
        target_map(sample(((1.0, 0.5), None)), 4)
    with pytest.raises(ValueError, match="square"):
        target_map(sample(((0.5, 0.5), None), np.zeros((48, 64, 3), np.uint8)), 4)


def test_object_labels_name_the_patch_under_each_object_centre() -> None:
    from oxygen_ros.train.data import object_labels
    from oxygen_ros.train.grounding import IGNORE

    names = ("red cup", "blue ball", "green block")
    square = np.zeros((64, 64, 3), np.uint8)

    def sample(seen):  # noqa: ANN001, ANN202
        return dataclasses.replace(next(fake_expert_samples(1, 4, 0.2, 64)), images=(square, square), object_uvs=seen)

    labels = object_labels(sample((((0.6, 0.3, "blue ball"), (0.1, 0.9, "green block")), ((0.5, 0.5, "red cup"),))), 4, names)
    assert labels.shape == (2, 16) and labels.dtype == torch.long
    assert labels[0, 1 * 4 + 2] == 1 and labels[0, 3 * 4 + 0] == 2 and labels[1, 2 * 4 + 2] == 0
    assert int((labels != IGNORE).sum()) == 3  # every other patch shows no object's centre
    shared = object_labels(sample((((0.55, 0.55, "blue ball"), (0.7, 0.7, "red cup")), ())), 4, names)
    assert bool((shared == IGNORE).all())  # two centres in one patch: it names neither
    assert bool((object_labels(sample((((0.5, 0.5, "purple cone"),), ())), 4, names) == IGNORE).all())
    assert bool((object_labels(sample(()), 4, names) == IGNORE).all())
    with pytest.raises(ValueError, match="outside"):
        object_labels(sample((((1.0, 0.5, "red cup"),), ())), 4, names)


def test_the_patch_heads_learn_and_stay_out_of_the_checkpoint(tmp_path: Path, tiny_preset: ModelConfig) -> None:
    """The training-only heads' pointing and naming losses fall; the checkpoint holds exactly the weights of a
    run without the heads (same names and shapes); with weight 0 (or no object names) there is no curve."""
    from safetensors import safe_open

    names = tuple(f"{c} {k}" for c in COLOURS for k in KINDS)
    on = train(small_config(tiny_preset, steps=30, lr=3e-3, warmup_steps=3, grounding_weight=1.0, pointing_weight=1.0,
                            object_names=names),
               fake_expert_samples, tmp_path / "on", progress=False)
    for key in ("grounding", "recognition", "pointing"):
        curve = on.history[key]
        assert len(curve) == 30 and np.mean(curve[-3:]) < 0.7 * np.mean(curve[:3]), key
    off = train(small_config(tiny_preset, grounding_weight=0.0, recognition_weight=0.0, pointing_weight=0.0,
                             object_names=names), fake_expert_samples, tmp_path / "off", progress=False)  # fmt: skip
    assert not {"grounding", "recognition", "pointing"} & set(off.history)
    unnamed = train(small_config(tiny_preset, steps=2), fake_expert_samples, tmp_path / "unnamed", progress=False)
    assert "recognition" not in unnamed.history and "grounding" in unnamed.history
    shapes = {}
    for name in ("on", "off"):
        with safe_open(str(tmp_path / name / "model.safetensors"), "pt") as f:
            shapes[name] = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    assert shapes["on"] == shapes["off"]
    summary = json.loads((tmp_path / "on" / "train_summary.json").read_text())
    assert summary["config"]["grounding_weight"] == 1.0 and "grounding" in summary["final_losses"]
    assert summary["config"]["object_names"] == list(names) and "recognition" in summary["final_losses"]


def test_the_pointing_loss_is_the_served_attention_on_the_texts_objects(tmp_path: Path, tiny_preset: ModelConfig) -> None:
    """The pointing loss equals the cross-entropy, against the read maps, of head 0's attention probabilities
    as the joint forward computes them (its own queries, keys and mask, captured in the attention call) at
    every position that predicts a token of the task's text: the first read in the middle layer, the second
    in the last; a look that finds no object is scored on all the weight it puts off the images."""
    import oxygen_ros.model.network.mot as mot
    from oxygen_ros.train.grounding import PatchHeads
    from oxygen_ros.train.pointing import default_layers

    model_config = dataclasses.replace(tiny_preset, backbone=dataclasses.replace(tiny_preset.backbone, depth=3),
                                       expert=dataclasses.replace(tiny_preset.expert, depth=3))  # fmt: skip
    runtime, data, _ = prepare(small_config(model_config, variations=True, pointing_weight=1.0), fake_expert_samples, tmp_path)
    model, cfg = runtime.model, runtime.model.config
    assert data.read_maps is not None and data.read_maps.shape[1:3] == (len(data.continuations), 2)
    images = data.read_maps.shape[-1] - 1
    assert images == int(data.image_slots.sum()) * cfg.tokens_per_image
    assert (data.read_maps[..., -1] == 1).any() and (data.read_maps[..., :-1].sum(-1) > 0).any()
    # without the loss the read maps are not built
    _, off, _ = prepare(small_config(model_config, variations=True, pointing_weight=0.0), fake_expert_samples, tmp_path / "off")
    assert off.read_maps is None and off.image_index.equal(data.image_index)
    batch = make_batch(data, torch.arange(8), cfg.tokens_per_image, cfg.pad_token_id)
    assert batch.read_spans is not None and int(batch.read_spans.max()) > 1
    eos = cfg.eos_token_id
    for row in range(8):  # each read row is the last token of its task's prompt (the question's, for "ask")
        for k, (at, span) in enumerate(zip(batch.read_rows[row].tolist(), batch.read_spans[row].tolist())):
            if at >= 0:
                assert batch.tokens[row, at - batch.num_image_tokens] == data.continuation(row, k)[-1]
                # ... and from there on, span positions predict the text's tokens, the next one its EOS
                labels = batch.labels[row, at - batch.num_image_tokens : at - batch.num_image_tokens + span + 1]
                assert (labels[:-1] != eos).all() and labels[-1] == eos
    calls = []
    served = mot.attend
    mot.attend = lambda q, k, v, mask, bias=None: calls.append((q, k, mask)) or served(q, k, v, mask, bias)
    try:
        heads = PatchHeads(layer=0, pointing_weight=1.0, pointing_layers=default_layers(3))
        with torch.no_grad():
            losses = compute_losses(model, batch, torch.Generator().manual_seed(0), heads=heads)
    finally:
        mot.attend = served
    assert heads.pointing_layers == (1, 2) and len(calls) == 3
    expected = []
    for hop, layer in enumerate(heads.pointing_layers):
        q, k, mask = calls[layer]
        scores = torch.einsum("bqd,bkd->bqk", q[:, :, 0], k[:, :, 0]) / cfg.backbone.head_dim**0.5
        probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        terms, away = [], 0
        for row in range(8):
            for k_task, (first, span) in enumerate(zip(batch.read_rows[row].tolist(), batch.read_spans[row].tolist())):
                target = batch.read_maps[row, k_task, hop]
                if first < 0 or target.sum() == 0:
                    continue
                for at in range(first, first + span):
                    p = torch.cat((probs[row, at, :images], probs[row, at, images:].sum().view(1)))
                    terms.append(-(target / target.sum() * p.log()).sum())
                    away += int(target[-1] > 0)
        assert terms and (away or hop == 0)
        expected.append(torch.stack(terms).mean())
    torch.testing.assert_close(losses.pointing, torch.stack(expected).mean(), rtol=1e-4, atol=1e-5)
    # a read at layer -1 is off: only the second read's look is trained
    with torch.no_grad():
        second = compute_losses(model, batch, torch.Generator().manual_seed(0),
                                heads=dataclasses.replace(heads, pointing_layers=(-1, 2))).pointing  # fmt: skip
    torch.testing.assert_close(second, expected[1], rtol=1e-4, atol=1e-5)


def test_the_patch_heads_read_layers_of_the_backbone(tmp_path: Path, tiny_preset: ModelConfig) -> None:
    depth = tiny_preset.backbone.depth
    with pytest.raises(ValueError, match="grounding_layer"):
        train(small_config(tiny_preset, grounding_weight=1.0, grounding_layer=depth), fake_expert_samples, tmp_path, progress=False)
    with pytest.raises(ValueError, match="recognition_layer"):
        train(small_config(tiny_preset, recognition_layer=depth), fake_expert_samples, tmp_path, progress=False)
    with pytest.raises(ValueError, match="pointing_layers"):
        train(small_config(tiny_preset, pointing_layers=(0, depth)), fake_expert_samples, tmp_path, progress=False)
    with pytest.raises(ValueError, match="pointing_layers"):
        train(small_config(tiny_preset, pointing_layers=(-2, 0)), fake_expert_samples, tmp_path, progress=False)

