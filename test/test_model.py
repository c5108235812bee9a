"""The model's correctness: backbone vs transformers' Gemma, vision vs SiglipVisionModel, cached vs uncached
action sampling, batched text extension vs one request at a time."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import GemmaConfig, GemmaForCausalLM, SiglipVisionConfig, SiglipVisionModel

from oxygen_ros.model.network.config import TINY, ModelConfig
from oxygen_ros.model.network.vla import Pi05Model


def make_model(cfg: ModelConfig = TINY, seed: int = 0) -> Pi05Model:
    torch.manual_seed(seed)
    model = Pi05Model(cfg).eval()
    # Non-trivial norm weights so a wrong (1 + w) convention would show.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "norm.weight":
                p.normal_(0.0, 0.3)
    return model


def hf_gemma(model: Pi05Model) -> GemmaForCausalLM:
    b = model.config.backbone
    hf_cfg = GemmaConfig(
        vocab_size=model.config.vocab_size,
        hidden_size=b.width,
        intermediate_size=b.mlp_dim,
        num_hidden_layers=b.depth,
        num_attention_heads=b.num_heads,
        num_key_value_heads=b.num_kv_heads,
        head_dim=b.head_dim,
        hidden_activation="gelu_pytorch_tanh",
        rms_norm_eps=b.rms_norm_eps,
        rope_theta=model.config.rope_theta,
        max_position_embeddings=4096,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
        tie_word_embeddings=True,
    )
    hf = GemmaForCausalLM(hf_cfg).eval()
    ours = model.state_dict()
    mapped = {"model.embed_tokens.weight": ours["embed_tokens.weight"], "model.norm.weight": ours["norm.weight"]}
    for key, value in ours.items():
        if key.startswith("layers.") and ".vlm." in key:
            mapped["model." + key.replace(".vlm.", ".")] = value
    mapped["lm_head.weight"] = ours["embed_tokens.weight"]
    missing, unexpected = hf.load_state_dict(mapped, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    return hf


def no_images(cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    s = cfg.vision.image_size
    return torch.zeros(cfg.num_image_slots, 3, s, s), torch.zeros(cfg.num_image_slots, dtype=torch.bool)


def kv_buffers(cfg: ModelConfig, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    b = cfg.backbone
    k = torch.zeros(b.depth, tokens, b.num_kv_heads, b.head_dim)
    return k, torch.zeros_like(k)


def contiguous_plan(ctx_lens: list[int], new: int, starts: list[int]) -> SimpleNamespace:
    """A plan for rows whose context occupies pool slots [start, start + ctx_len) (new tokens last)."""
    t = max(ctx_lens)
    ctx_index = torch.zeros(len(ctx_lens), t, dtype=torch.long)
    for row, (n, start) in enumerate(zip(ctx_lens, starts)):
        ctx_index[row, :n] = torch.arange(start, start + n)
    write = torch.stack([torch.arange(s + n - new, s + n) for n, s in zip(ctx_lens, starts)])
    positions = torch.stack([torch.arange(n - new, n) for n in ctx_lens])
    return SimpleNamespace(ctx_index=ctx_index, ctx_len=torch.tensor(ctx_lens), write_index=write, positions=positions)


def test_backbone_logits_match_transformers_gemma() -> None:
    model = make_model()
    hf = hf_gemma(model)
    images, mask = no_images(TINY)
    for length in (1, 5, 17):
        tokens = torch.randint(4, TINY.vocab_size, (length,), generator=torch.Generator().manual_seed(length))
        k, v = kv_buffers(TINY, length)
        out = model.prefill(images, mask, tokens, k, v)
        ours = model.lm_logits(out.last_hidden)
        with torch.no_grad():
            ref = hf(tokens.unsqueeze(0)).logits[0, -1]
        torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


def test_greedy_decoding_with_our_cache_matches_transformers_generate() -> None:
    model = make_model(seed=3)
    hf = hf_gemma(model)
    images, mask = no_images(TINY)
    prompt = torch.tensor([2, 17, 99, 250, 31, 8])
    steps = 12
    k, v = kv_buffers(TINY, len(prompt) + steps)
    out = model.prefill(images, mask, prompt, k, v)
    generated = [int(model.greedy_tokens(out.last_hidden.unsqueeze(0))[0])]
    for _ in range(steps - 1):
        ctx = len(prompt) + len(generated)
        plan = contiguous_plan([ctx], 1, [0])
        hidden = model.extend(torch.tensor([[generated[-1]]]), plan, k, v)
        generated.append(int(model.greedy_tokens(hidden)[0]))
    with torch.no_grad():
        ref = hf.generate(prompt.unsqueeze(0), max_new_tokens=steps, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert generated == ref[0, len(prompt):].tolist()


def test_vision_tower_matches_transformers_siglip() -> None:
    model = make_model()
    v = TINY.vision
    hf_cfg = SiglipVisionConfig(
        hidden_size=v.width,
        intermediate_size=v.mlp_dim,
        num_hidden_layers=v.depth,
        num_attention_heads=v.num_heads,
        image_size=v.image_size,
        patch_size=v.patch_size,
        hidden_act="gelu_pytorch_tanh",
        layer_norm_eps=v.layer_norm_eps,
        vision_use_head=False,
    )
    hf = SiglipVisionModel(hf_cfg).eval()
    ours = model.vision_tower.state_dict()
    mapped = {}
    for key, value in ours.items():
        if key.startswith(("patch_embedding", "position_embedding")):
            mapped[f"embeddings.{key}"] = value
        elif key.startswith("layers."):
            mapped[f"encoder.{key}"] = value
        else:
            mapped[key] = value
    hf.load_state_dict(mapped, strict=True)
    images = torch.rand(2, 3, v.image_size, v.image_size) * 2 - 1
    with torch.no_grad():
        ref = hf(pixel_values=images).last_hidden_state
    torch.testing.assert_close(model.vision_tower(images), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("prefix_attention", ["causal_text", "bidirectional"])
def test_cached_action_chunk_equals_uncached_joint_forward(prefix_attention: str) -> None:
    cfg = TINY.replace(prefix_attention=prefix_attention)
    model = make_model(cfg)
    s = cfg.vision.image_size
    images = torch.rand(cfg.num_image_slots, 3, s, s) * 2 - 1
    mask = torch.tensor([True, False, True])  # a missing middle camera is a masked slot
    tokens = torch.randint(4, cfg.vocab_size, (9,))
    k, v = kv_buffers(cfg, 200)
    out = model.prefill(images, mask, tokens, k, v)
    assert out.length == 2 * cfg.tokens_per_image + 9
    before = k.clone()
    noise = torch.randn(cfg.action_horizon, cfg.action_dim)
    cached = model.sample_actions(k[:, : out.length], v[:, : out.length], noise)
    assert torch.equal(k, before), "action sampling must not modify the prefix cache"
    reference = model.sample_actions_uncached(images, mask, tokens, noise)
    torch.testing.assert_close(cached, reference, rtol=1e-4, atol=1e-5)
    assert cached.shape == (cfg.action_horizon, cfg.action_dim)
    assert not torch.allclose(cached, noise)


def test_prefix_attention_modes_differ_on_text() -> None:
    images, mask = no_images(TINY)
    tokens = torch.randint(4, TINY.vocab_size, (6,))
    outs = []
    for mode in ("causal_text", "bidirectional"):
        model = make_model(TINY.replace(prefix_attention=mode))
        k, v = kv_buffers(TINY, 6)
        model.prefill(images, mask, tokens, k, v)
        outs.append(k)
    # The first token's key at layer 0 is position-only; deeper layers see different contexts.
    assert not torch.allclose(outs[0][1], outs[1][1])


def test_batched_extend_with_different_lengths_equals_each_alone() -> None:
    model = make_model(seed=5)
    images, mask = no_images(TINY)
    lengths = [3, 11, 7]
    pool_k, pool_v = kv_buffers(TINY, 64)
    starts, prompts = [0, 16, 40], []
    for n, start in zip(lengths, starts):
        prompt = torch.randint(4, TINY.vocab_size, (n,))
        prompts.append(prompt)
        model.prefill(images, mask, prompt, pool_k[:, start:], pool_v[:, start:])
    next_tokens = torch.tensor([[5], [77], [300]])
    snapshot_k, snapshot_v = pool_k.clone(), pool_v.clone()
    batched = model.extend(next_tokens, contiguous_plan([n + 1 for n in lengths], 1, starts), pool_k, pool_v)
    for row, (n, start) in enumerate(zip(lengths, starts)):
        k, v = snapshot_k.clone(), snapshot_v.clone()
        alone = model.extend(next_tokens[row : row + 1], contiguous_plan([n + 1], 1, [start]), k, v)
        torch.testing.assert_close(batched[row], alone[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model.lm_logits(batched[row]), model.lm_logits(alone[0]), rtol=1e-5, atol=1e-5)


def test_multi_token_extension_equals_prefill_of_the_whole_text() -> None:
    """A continuation prompt fed through ``extend`` continues the prefix exactly like one longer prefill."""
    model = make_model(seed=7)
    images, mask = no_images(TINY)
    head, tail = torch.randint(4, TINY.vocab_size, (5,)), torch.randint(4, TINY.vocab_size, (4,))
    k, v = kv_buffers(TINY, 32)
    model.prefill(images, mask, head, k, v)
    hidden = model.extend(tail.unsqueeze(0), contiguous_plan([9], 4, [0]), k, v)
    k2, v2 = kv_buffers(TINY, 32)
    whole = model.prefill(images, mask, torch.cat((head, tail)), k2, v2)
    torch.testing.assert_close(hidden[0], whole.last_hidden, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k[:, :9], k2[:, :9], rtol=1e-5, atol=1e-6)


def test_bfloat16_model_runs_and_stays_close_to_float32() -> None:
    model = make_model(seed=11)
    images = torch.rand(3, 3, 56, 56) * 2 - 1
    mask = torch.tensor([True, True, False])
    tokens = torch.randint(4, TINY.vocab_size, (8,))
    noise = torch.randn(TINY.action_horizon, TINY.action_dim)
    k, v = kv_buffers(TINY, 128)
    out = model.prefill(images, mask, tokens, k, v)
    ref = model.sample_actions(k[:, : out.length], v[:, : out.length], noise)
    model_bf16 = model.to(torch.bfloat16)
    kb, vb = k.to(torch.bfloat16), v.to(torch.bfloat16)
    out_b = model_bf16.prefill(images, mask, tokens, kb, vb)
    got = model_bf16.sample_actions(kb[:, : out_b.length], vb[:, : out_b.length], noise)
    assert got.dtype == torch.float32
    assert (got - ref).abs().max() < 0.1 * ref.abs().max() + 0.05


def test_bad_inputs_raise_clear_errors() -> None:
    model = make_model()
    images, mask = no_images(TINY)
    k, v = kv_buffers(TINY, 8)
    with pytest.raises(ValueError, match="non-empty"):
        model.prefill(images, mask, torch.tensor([], dtype=torch.long), k, v)
    with pytest.raises(ValueError, match="allows"):
        model.prefill(images, mask, torch.ones(TINY.max_prompt_tokens + 1, dtype=torch.long), k, v)
    with pytest.raises(ValueError, match="holds 8 tokens"):
        model.prefill(images, mask, torch.ones(9, dtype=torch.long), k, v)
    with pytest.raises(ValueError, match="image slots"):
        model.prefill(images[:2], mask[:2], torch.ones(3, dtype=torch.long), k, v)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_folded_attention_equals_the_fused_kernel(kv_heads: int) -> None:
    """The decode path's folded matmul attention (and the two-part form the action expert uses) equals SDPA."""
    import torch.nn.functional as F

    from oxygen_ros.model.network.layers import attend, attend_two_parts

    g = torch.Generator().manual_seed(kv_heads)
    b, s, h, d, t = 3, 5, 4, 8, 11
    q = torch.randn(b, s, h, d, generator=g)
    k, v = torch.randn(b, t, kv_heads, d, generator=g), torch.randn(b, t, kv_heads, d, generator=g)
    mask = torch.rand(b, s, t, generator=g) > 0.3
    mask[..., 0] = True
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         attn_mask=mask.unsqueeze(1), enable_gqa=kv_heads != h)
    torch.testing.assert_close(attend(q, k, v, mask), ref.transpose(1, 2).reshape(b, s, h * d), rtol=1e-5, atol=1e-6)
    full = attend(q, k, v, torch.ones(b, s, t, dtype=torch.bool))
    torch.testing.assert_close(attend_two_parts(q, k[:, :7], v[:, :7], k[:, 7:], v[:, 7:]), full, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("steps", [3, 10, 7])
def test_flow_times_advance_as_openpi_does(steps: int) -> None:
    """openpi ``sample_actions``: ``time = 1.0`` (float32), then ``time += dt`` with ``dt = -1 / steps`` in float32
    after every step, while ``time >= -dt / 2``."""
    dt = torch.tensor(-1.0 / steps, dtype=torch.float32)
    time, expected = torch.tensor(1.0, dtype=torch.float32), []
    while time >= -dt / 2:
        expected.append(time.item())
        time = time + dt
    model = Pi05Model(TINY)
    schedule = model.denoise_schedule(prefix_length=4, horizon=TINY.action_horizon, num_steps=steps)
    assert schedule.times == expected and len(expected) == steps
    closed_form = (1.0 + (-1.0 / steps) * torch.arange(steps, dtype=torch.float32)).tolist()
    assert closed_form != expected  # ``1 + dt·k`` rounds differently: the test can tell
