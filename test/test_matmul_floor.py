"""The matrix-product floor: what it records of a prefill and of a plain and a guided (real-time chunking)
action chunk, and that a guided chunk differentiates with respect to x_t only."""

from __future__ import annotations

import torch

from engine_fixtures import make_frame, tiny_model
from oxygen_ros.bench.matmul_floor import MatmulFloor
from oxygen_ros.model.network.rtc import denoised_vjp, prefix_weights, sample_actions_rtc

CPU = torch.device("cpu")


def _prefix(model):  # noqa: ANN001, ANN202
    cfg, b = model.config, model.config.backbone
    frame = make_frame(cfg, 3)
    k = torch.zeros(b.depth, 400, b.num_kv_heads, b.head_dim)
    v = torch.zeros_like(k)
    n = model.prefill(frame.images, frame.image_mask, frame.prompt_tokens, k, v).length
    return frame, k, v, n


def test_the_prefill_floor_holds_the_weights_products_and_replays_them() -> None:
    model = tiny_model(seed=1)
    frame, k, v, n = _prefix(model)
    floor = MatmulFloor.capture(lambda: model.prefill(frame.images, frame.image_mask, frame.prompt_tokens, k, v), CPU)
    cfg = model.config
    # per vision block 6 (q, k, v, out, fc1, fc2), the patch embedding and the projector, 7 per backbone layer
    assert floor.count == 6 * cfg.vision.depth + 2 + 7 * cfg.backbone.depth
    weights = sum(p.numel() for p in model.vision_tower.layers.parameters() if p.dim() == 2)
    assert floor.flops >= 2 * weights * (n - frame.prompt_tokens.numel())
    assert floor.time_once() > 0


def test_a_guided_chunk_adds_one_input_gradient_per_forward_product() -> None:
    """Forward plus the VJP with respect to x_t: about twice the plain chunk's multiply-adds. Weight gradients
    would add a third forward's worth: the model's weights never require grad."""
    model = tiny_model(seed=2)
    _, k, v, n = _prefix(model)
    cfg = model.config
    noise = torch.randn(cfg.action_horizon, cfg.action_dim, generator=torch.Generator().manual_seed(0))
    weights = prefix_weights(2, cfg.action_horizon, cfg.action_horizon)
    plain = MatmulFloor.capture(lambda: model.sample_actions(k[:, :n], v[:, :n], noise), CPU)
    guided = MatmulFloor.capture(lambda: sample_actions_rtc(model, k[:, :n], v[:, :n], noise, noise, weights, 5.0), CPU,
                                 grad=True)
    assert not any(p.requires_grad for p in model.parameters())
    assert 1.9 * plain.flops < guided.flops < 2.2 * plain.flops, (plain.flops, guided.flops)

    # The same step differentiated with respect to the weights too: the band above would catch it.
    schedule = model.denoise_schedule(n, cfg.action_horizon)
    pk, pv = k[:, :n].unsqueeze(1), v[:, :n].unsqueeze(1)
    params = [p for p in model.parameters() if p.dim() == 2]

    def step_with_weight_grads() -> None:
        for p in params:
            p.requires_grad_(True)
        try:
            x = noise.unsqueeze(0).clone().requires_grad_(True)
            x0 = x - model.expert_velocity(x, pk, pv, schedule, 0)
            torch.autograd.grad(x0, [x, *params], torch.ones_like(x0), allow_unused=True)
        finally:
            for p in params:
                p.requires_grad_(False)

    one_step = MatmulFloor.capture(lambda: denoised_vjp(model, noise.unsqueeze(0), pk, pv, schedule, 0,
                                                        lambda x0: x0), CPU, grad=True)
    with_weights = MatmulFloor.capture(step_with_weight_grads, CPU, grad=True)
    assert with_weights.flops > 1.3 * one_step.flops


def test_the_attention_floor_holds_each_attention_calls_scores_and_values() -> None:
    model = tiny_model(seed=1)
    frame, k, v, n = _prefix(model)
    cfg, vis, b = model.config, model.config.vision, model.config.backbone
    assert cfg.prefix_attention == "causal_text"
    floor = MatmulFloor.capture(lambda: model.prefill(frame.images, frame.image_mask, frame.prompt_tokens, k, v), CPU,
                                attention=True)
    images, text = int(frame.image_mask.sum()), frame.prompt_tokens.numel()
    patches, group = (vis.image_size // vis.patch_size) ** 2, b.num_heads // b.num_kv_heads
    n_img = n - text
    # 2 products of 2·rows·keys·head_dim each per call: the vision tower's; then per backbone layer the image
    # block and the prompt rows (causal_text), the last layer only its last position
    vision = 4 * images * vis.num_heads * patches * patches * (vis.width // vis.num_heads)
    block = 4 * b.num_kv_heads * b.head_dim * group * (n_img * n_img + text * n)
    last = 4 * b.num_kv_heads * b.head_dim * group * n
    assert floor.count == 2 * (vis.depth + 2 * (b.depth - 1) + 1)
    assert floor.flops == vis.depth * vision + (b.depth - 1) * block + last
    assert floor.time_once() > 0
