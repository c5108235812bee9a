"""The pi0.5 Mixture-of-Transformers VLA and the API the KV manager and scheduler drive.

A frame's prefix (camera images + prompt) is computed once by :meth:`Pi05Model.prefill`, which writes its
keys/values into caller-provided memory. Consumers then read that memory without modifying it:

* :meth:`Pi05Model.sample_actions` denoises an action chunk against the prefix (read in place every step);
* :meth:`Pi05Model.extend` runs new text tokens for a batch of requests whose contexts live anywhere in a
  shared KV pool (a continuation prompt for one request, or one decode step for many requests of
  different lengths), writing only the new tokens' keys/values.

Masked camera slots and prompt padding are not computed at all: positions advance only over valid tokens,
which is what openpi's ``cumsum(mask) - 1`` positions amount to.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oxygen_ros.model.network.config import ModelConfig
from oxygen_ros.model.network.layers import (
    AdaRMSNorm,
    RMSNorm,
    RotaryEmbedding,
    apply_rope,
    attend,
    attend_two_parts,
    folded_mask_bias,
    sinusoidal_time_embedding,
)
from oxygen_ros.model.network.mot import NO_MODULATION, ExpertBlock, Modulations, MoTLayer
from oxygen_ros.model.network.packed_decode import (PACK_LIMIT_BYTES, can_pack, is_packed, linear_bytes, pack_linears, packed_copy, packed_linear,
                            set_packed)
from oxygen_ros.model.network.prefix_attention import last_token_attention, prefix_attention, text_rows_mask
from oxygen_ros.model.network.vision import SiglipBlock, VisionTower, block_on_rows


class ExtendPlan(Protocol):
    """Where a batch of new tokens sits in the KV pool (built by ``oxygen_ros.kv.batch``)."""

    ctx_index: Tensor  # [B, T] pool slots of every context token of each row (incl. the new ones), right-padded
    ctx_len: Tensor  # [B] valid context length of each row, including the new tokens
    write_index: Tensor  # [B, S] pool slots for the new tokens' keys/values
    positions: Tensor  # [B, S] RoPE positions of the new tokens


def prefix_layer(block: ExpertBlock, x: Tensor, cos: Tensor, sin: Tensor, text_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """One backbone layer over the whole prefix x [1, T, W] → (x, k, v); ``text_mask`` as in ``prefix_attention``."""
    q, k, v, _ = block.pre_attention(x, NO_MODULATION)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    return block.post_attention(x, prefix_attention(q, k, v, text_mask), None, NO_MODULATION), k, v


def last_prefix_layer(block: ExpertBlock, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The final backbone layer: keys and values of every position, the output [1, 1, W] of the last only."""
    q, k, v, _ = block.pre_attention(x, NO_MODULATION)
    q, k = apply_rope(q[:, -1:], cos[:, -1:], sin[:, -1:]), apply_rope(k, cos, sin)
    return block.post_attention(x[:, -1:], last_token_attention(q, k, v), None, NO_MODULATION), k, v


@dataclass(frozen=True)
class PrefixLayers:
    """How :meth:`Pi05Model.prefix_network` runs its layers: these functions, or their compiled forms."""

    vision: Callable[[SiglipBlock, Tensor], Tensor] = block_on_rows
    backbone: Callable[..., tuple[Tensor, Tensor, Tensor]] = prefix_layer
    last: Callable[..., tuple[Tensor, Tensor, Tensor]] = last_prefix_layer


EAGER_LAYERS = PrefixLayers()


class VelocityFn(Protocol):
    """:meth:`Pi05Model.expert_network`'s signature (eager, compiled or captured in a CUDA graph)."""

    def __call__(self, x_t: Tensor, prefix_k: Sequence[Tensor], prefix_v: Sequence[Tensor], cos: Tensor, sin: Tensor,
                 mods: Tensor, prefix_bias: Tensor | None = None) -> Tensor: ...


@dataclass
class DenoiseSchedule:
    """The x_t-independent inputs of every Euler step of one chunk (see ``Pi05Model.denoise_schedule``)."""

    steps: int
    dt: float  # negative: time runs from 1 (noise) to 0 (actions)
    times: list[float]  # flow time at each step
    cos: Tensor  # [1, H, head_dim] RoPE of the H action positions
    sin: Tensor
    mods: Tensor  # [steps, 2·L + 1, 3W]: every adaptive norm's modulation at every step (``_action_modulations``)


def flow_times(steps: int) -> Tensor:
    """The flow time of each Euler step as openpi and LeRobot advance it: ``time += dt`` in float32 from 1,
    so rounding accumulates exactly as theirs does (``1 + dt·k`` differs by up to 1.2e-7)."""
    dt = torch.tensor(-1.0 / steps, dtype=torch.float32)
    times = torch.empty(steps, dtype=torch.float32)
    time = torch.tensor(1.0, dtype=torch.float32)
    for k in range(steps):
        times[k] = time
        time = time + dt
    return times


def layer_modulations(mods: Tensor, layer: int) -> Modulations:
    """Layer ``layer``'s (input, post-attention) norm modulations from one flow time's row [2·L + 1, 3W]."""
    return mods[2 * layer : 2 * layer + 1], mods[2 * layer + 1 : 2 * layer + 2]


@dataclass
class PrefixOutput:
    length: int  # tokens written to the KV memory
    num_image_tokens: int
    last_hidden: Tensor  # [W] final-normed hidden state of the last prompt token (next-token logits source)


class Pi05Model(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        b, e = config.backbone, config.expert
        self.vision_tower = VisionTower(config.vision)
        self.multi_modal_projector = nn.Linear(config.vision.width, b.width)
        self.embed_tokens = nn.Embedding(config.vocab_size, b.width)
        # The text head: the embedding itself (tied, as PaliGemma ships), unless a checkpoint stores a different
        # ``lm_head`` (LeRobot fine-tunes train the embedding only); then ``untie_text_head`` sets it.
        self.lm_head: nn.Linear | None = None
        self.layers = nn.ModuleList(MoTLayer(b, e) for _ in range(b.depth))
        self.norm = RMSNorm(b.width, b.rms_norm_eps)
        self.action_norm = AdaRMSNorm(e.width, e.width, e.rms_norm_eps)
        self.action_in_proj = nn.Linear(config.action_dim, e.width)
        self.action_out_proj = nn.Linear(e.width, config.action_dim)
        self.time_mlp_in = nn.Linear(e.width, e.width)
        self.time_mlp_out = nn.Linear(e.width, e.width)
        self.rope = RotaryEmbedding(b.head_dim, config.rope_theta)
        self.requires_grad_(False)  # inference only: no autograd bookkeeping anywhere

    # ----------------------------------------------------------------------------------------------- helpers
    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def embed_text(self, tokens: Tensor) -> Tensor:
        scale = torch.tensor(math.sqrt(self.config.backbone.width), dtype=self.dtype)
        return self.embed_tokens(tokens) * scale

    def image_features(self, patches: Tensor) -> Tensor:
        """Patches [N·P, 3·p·p] of N ≥ 1 images → projected image tokens [1, N·P, W]."""
        return self.project_images(self.vision_tower.forward_patches(patches).flatten(0, 1))

    def project_images(self, feats: Tensor) -> Tensor:
        """Vision features [N·P, Wv] → image tokens [1, N·P, W] of the backbone."""
        feats = self.multi_modal_projector(feats.to(self.multi_modal_projector.weight.dtype)).to(self.dtype)
        return feats.unsqueeze(0)

    def embed_prefix(self, images: Tensor, image_mask: Tensor, tokens: Tensor) -> tuple[Tensor, int]:
        """images [slots, 3, S, S], image_mask [slots] bool, tokens [n] → embeds [1, T, W], image tokens."""
        patches, text = self.prefix_inputs(images, image_mask, tokens)
        if not patches.shape[0]:
            return text, 0
        return torch.cat((self.image_features(patches), text), dim=1), patches.shape[0]

    def prefix_mask(self, n_img: int, n_txt: int) -> Tensor:
        """[T, T] bool: who in the prefix may attend to whom."""
        t = n_img + n_txt
        if self.config.prefix_attention == "bidirectional":
            return torch.ones(t, t, dtype=torch.bool, device=self.device)
        # causal_text (OxyGen): images see images; text token i sees all images and text ≤ i.
        mask = torch.ones(t, t, dtype=torch.bool, device=self.device).tril()
        mask[:n_img, :n_img] = True
        return mask

    def _time_condition(self, t: Tensor) -> Tensor:
        emb = sinusoidal_time_embedding(t, self.config.expert.width).to(self.time_mlp_in.weight.dtype)
        return F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(emb))))

    def _embed_actions(self, x_t: Tensor) -> Tensor:
        """Noisy actions → expert tokens (action_in_proj may be a float32 island; the expert runs in self.dtype)."""
        return self.action_in_proj(x_t.to(self.action_in_proj.weight.dtype)).to(self.dtype)

    def _velocity(self, x: Tensor) -> Tensor:
        """Final-normed expert tokens → float32 flow velocity (action_out_proj may be a float32 island)."""
        return self.action_out_proj(x.to(self.action_out_proj.weight.dtype)).float()

    def _action_modulations(self, times: Tensor) -> Tensor:
        """Every adaptive norm's modulation for every flow time, in one matrix product.

        times [N] → [N, 2·L + 1, 3W]: per time, layer i's input and post-attention norm modulations at rows
        2i and 2i + 1, the final norm's last. The times of a whole Euler schedule are known before it starts,
        so this runs once per chunk.
        """
        norms = [n for layer in self.layers for n in layer.action.adaptive_norms()] + [self.action_norm]
        weight = torch.cat([n.dense.weight for n in norms])
        bias = torch.cat([n.dense.bias for n in norms])
        return F.linear(self._time_condition(times).to(weight.dtype), weight, bias).unflatten(-1, (len(norms), -1))

    # ------------------------------------------------------------------------------------------------ prefill
    def image_tokens(self, patches: Tensor, vision: Callable[[SiglipBlock, Tensor], Tensor] = block_on_rows) -> Tensor:
        """Patches [N·P, 3·p·p] of N ≥ 1 images → image tokens [1, N·P, W]; ``vision`` runs each block (as
        :class:`PrefixLayers`)."""
        feats = self.vision_tower.embed_patches(patches)
        for block in self.vision_tower.layers:
            feats = vision(block, feats)
        return self.project_images(self.vision_tower.post_layernorm(feats))

    def prefix_inputs(self, images: Tensor, image_mask: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """images [slots, 3, S, S], image_mask [slots] bool, tokens [n] → the patches of the valid images
        [N·P, 3·p·p] and the embedded prompt [1, n, W]: :meth:`prefix_network`'s inputs."""
        cfg = self.config
        if images.shape[0] != cfg.num_image_slots or image_mask.shape != (cfg.num_image_slots,):
            raise ValueError(f"expected {cfg.num_image_slots} image slots and a mask of that length")
        if tokens.dim() != 1 or tokens.numel() == 0:
            raise ValueError("tokens must be a non-empty 1-D tensor")
        if tokens.numel() > cfg.max_prompt_tokens:
            raise ValueError(f"prompt has {tokens.numel()} tokens; the model allows {cfg.max_prompt_tokens}")
        valid = images.index_select(0, image_mask.to(torch.bool).nonzero().flatten().to(images.device))
        patches = self.vision_tower.patchify(valid.to(self.device))
        return patches, self.embed_text(tokens.to(self.device)).unsqueeze(0)

    def prefix_network(self, patches: Tensor, text: Tensor, k_out: Tensor, v_out: Tensor,
                       layers: PrefixLayers | None = None) -> Tensor:
        """The prefill on tensors: patches [N·P, 3·p·p] of the N valid images (N may be 0) and the embedded
        prompt text [1, n, W]; writes the keys and values of the T = N·P + n positions into k_out/v_out
        [L, ≥T, Hkv, D] and returns the final-normed hidden state [W] of the last position.

        Attention follows the prefix's structure (``prefix_attention``), never a [T, T] mask; the last layer
        computes only the last position, the only one whose output is ever read. ``layers`` runs each layer
        (``EAGER_LAYERS``, or their compiled forms: ``oxygen_ros.model.backends.compiled_prefill``).
        """
        run = layers or EAGER_LAYERS
        x = text
        if patches.shape[0]:
            x = torch.cat((self.image_tokens(patches, run.vision), text), dim=1)
        t = x.shape[1]
        cos, sin = self.rope.cos_sin(torch.arange(t, device=x.device).unsqueeze(0), self.dtype)
        text_mask = None
        if self.config.prefix_attention == "causal_text":
            b = self.config.backbone
            text_mask = text_rows_mask(t - text.shape[1], text.shape[1], b.num_heads // b.num_kv_heads, x.device)
        for i, layer in enumerate(self.layers):
            if i < len(self.layers) - 1:
                x, k, v = run.backbone(layer.vlm, x, cos, sin, text_mask)
            else:
                x, k, v = run.last(layer.vlm, x, cos, sin)
            k_out[i, :t].copy_(k[0])
            v_out[i, :t].copy_(v[0])
        hidden, _ = self.norm(x[0, -1])
        return hidden

    @torch.inference_mode()
    def prefill(self, images: Tensor, image_mask: Tensor, tokens: Tensor, k_out: Tensor, v_out: Tensor,
                layers: PrefixLayers | None = None) -> PrefixOutput:
        """Run the observation prefix through the backbone once and write its KV into ``k_out``/``v_out``.

        ``k_out``/``v_out`` are [L, ≥T, Hkv, D] (typically zero-copy views into the KV pool). ``layers``: as in
        :meth:`prefix_network`.
        """
        patches, text = self.prefix_inputs(images, image_mask, tokens)
        n_img = patches.shape[0]  # one token per patch
        t = n_img + text.shape[1]
        if k_out.shape[1] < t:
            raise ValueError(f"KV destination holds {k_out.shape[1]} tokens; the prefix has {t}")
        hidden = self.prefix_network(patches, text, k_out, v_out, layers)
        return PrefixOutput(length=t, num_image_tokens=n_img, last_hidden=hidden)

    # ---------------------------------------------------------------------------------------------- actions
    def denoise_schedule(self, prefix_length: int | Sequence[int], horizon: int, num_steps: int | None = None) -> DenoiseSchedule:
        """What every Euler step of one chunk needs and that does not depend on x_t: the action tokens' RoPE
        tables, the flow times (1 → 0) and every adaptive norm's modulation at each of them. Several prefix
        lengths (a batch of chunks) give one row of RoPE tables per chunk."""
        steps = num_steps or self.config.num_denoise_steps
        lengths = [prefix_length] if isinstance(prefix_length, int) else list(prefix_length)
        start = torch.tensor(lengths, device=self.device).unsqueeze(1)
        positions = start + torch.arange(horizon, device=self.device).unsqueeze(0)  # [B, H]
        cos, sin = self.rope.cos_sin(positions, self.dtype)
        dt = -1.0 / steps
        times = flow_times(steps)
        return DenoiseSchedule(steps, dt, times.tolist(), cos, sin, self._action_modulations(times.to(self.device)))

    def expert_network(
        self, x_t: Tensor, prefix_k: Sequence[Tensor], prefix_v: Sequence[Tensor], cos: Tensor, sin: Tensor,
        mods: Tensor, prefix_bias: Tensor | None = None,
    ) -> Tensor:
        """One evaluation of the action expert on tensors only (what ``torch.compile`` and CUDA graphs wrap).

        x_t [1, H, A] float32 → velocity [1, H, A] float32. prefix_k/v[i] [1, T, Hkv, D] is layer i's cached
        prefix (a [L, 1, T, Hkv, D] tensor or a sequence of per-layer views), read, never written; ``mods``
        [2·L + 1, 3W] is one flow time's row of :meth:`_action_modulations`; ``prefix_bias`` [T] (0 or -inf)
        hides prefix slots (a prefix padded to a static length). A batch of chunks: x_t [B, H, A], prefix
        [B, T, Hkv, D] per layer, cos/sin [B, H, D] and ``prefix_bias`` [B, 1, 1, T] (see ``pad_prefixes``).
        """
        x = self._embed_actions(x_t)
        for i, layer in enumerate(self.layers):
            m = layer_modulations(mods, i)
            q, k, v, gate = layer.action.pre_attention(x, m)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            attn = attend_two_parts(q, prefix_k[i], prefix_v[i], k, v, prefix_bias)
            x = layer.action.post_attention(x, attn, gate, m)
        x, _ = self.action_norm(x, mods[-1:])
        return self._velocity(x)

    def expert_velocity(self, x_t: Tensor, prefix_k: Tensor, prefix_v: Tensor, schedule: DenoiseSchedule, step: int) -> Tensor:
        """The flow velocity v(x_t, t_step) from the action expert alone (the eager :meth:`expert_network`),
        reading the prefix KV in place.

        x_t [1, H, A] float32; prefix_k/v [L, 1, T, Hkv, D]. Differentiable in x_t when called outside
        inference mode (real-time chunking takes a vector-Jacobian product through it); the weights are frozen.
        """
        return self.expert_network(x_t, prefix_k, prefix_v, schedule.cos, schedule.sin, schedule.mods[step])

    @torch.inference_mode()
    def sample_actions(
        self, prefix_k: Tensor, prefix_v: Tensor, noise: Tensor, num_steps: int | None = None,
        network: VelocityFn | None = None,
    ) -> Tensor:
        """Euler flow-matching from t=1 (noise) to t=0 against a cached prefix.

        prefix_k/v [L, T, Hkv, D] are read in place at every step and never written. noise [H, A] → [H, A]
        (float32, still normalized). ``network`` replaces :meth:`expert_network` (same signature), e.g. by its
        compiled form (``oxygen_ros.model.backends.compiled``).
        """
        schedule = self.denoise_schedule(prefix_k.shape[1], noise.shape[0], num_steps)
        pk, pv = prefix_k.unsqueeze(1), prefix_v.unsqueeze(1)  # [L, 1, T, Hkv, D] views
        x_t = noise.to(self.device, torch.float32).unsqueeze(0)
        return self.denoise(pk, pv, x_t, schedule, network or self.expert_network)[0]

    @torch.inference_mode()
    def sample_actions_batch(
        self, prefix_k: Sequence[Tensor], prefix_v: Sequence[Tensor], noise: Tensor, num_steps: int | None = None,
        network: VelocityFn | None = None,
    ) -> Tensor:
        """One action chunk for each of B prefixes of different lengths, in one batched Euler loop.

        prefix_k/v[b] [L, T_b, Hkv, D] (read only); noise [B, H, A] → [B, H, A] float32. The prefixes are
        copied into one right-padded [L, B, T_max, Hkv, D] block whose padding a key bias hides, and each
        chunk's action tokens take RoPE positions after its own prefix, so chunk b equals
        :meth:`sample_actions` on prefix b alone up to floating-point rounding.
        """
        if len(prefix_k) != noise.shape[0] or len(prefix_v) != noise.shape[0]:
            raise ValueError(f"{len(prefix_k)} prefixes for {noise.shape[0]} noise rows")
        pk, pv, bias = pad_prefixes(prefix_k, prefix_v)
        schedule = self.denoise_schedule([k.shape[1] for k in prefix_k], noise.shape[1], num_steps)
        x_t = noise.to(self.device, torch.float32)
        return self.denoise(pk, pv, x_t, schedule, network or self.expert_network, bias)

    def denoise(
        self, prefix_k: Sequence[Tensor], prefix_v: Sequence[Tensor], x_t: Tensor, schedule: DenoiseSchedule,
        network: VelocityFn, prefix_bias: Tensor | None = None,
    ) -> Tensor:
        """The Euler steps of a schedule from x_t [1, H, A] (float32); prefix_k/v[i] [1, T, Hkv, D]. No
        allocation depends on data, so a CUDA graph can capture it."""
        s = schedule
        for step in range(s.steps):
            x_t = x_t + s.dt * network(x_t, prefix_k, prefix_v, s.cos, s.sin, s.mods[step], prefix_bias)
        return x_t

    # ------------------------------------------------------------------------------------------------- text
    @torch.inference_mode()
    def extend(self, tokens: Tensor, plan: ExtendPlan, pool_k: Tensor, pool_v: Tensor) -> Tensor:
        """Feed new text tokens [B, S] for B requests whose contexts live in the pool; → hidden [B, W].

        Writes the new tokens' K/V at ``plan.write_index`` and attends over ``plan.ctx_index`` (right-padded;
        row b sees its first ``ctx_len[b]`` slots, causally for the new tokens). Returns the final-normed
        hidden state of each row's last new token.
        """
        b, s = tokens.shape
        hkv, d = pool_k.shape[2], pool_k.shape[3]
        x = self.embed_text(tokens.to(self.device))
        cos, sin = self.rope.cos_sin(plan.positions, self.dtype)
        t = plan.ctx_index.shape[1]
        limit = plan.ctx_len.unsqueeze(1) - s + torch.arange(1, s + 1, device=self.device).unsqueeze(0)  # [B, S]
        mask = torch.arange(t, device=self.device).view(1, 1, t) < limit.unsqueeze(-1)  # [B, S, T]
        bias = folded_mask_bias(mask, self.config.backbone.num_heads // hkv)  # once per call, not per layer
        write = plan.write_index.reshape(-1)
        gather = plan.ctx_index.reshape(-1)
        src = getattr(plan, "write_src", None)  # a recorded (CUDA graph) step: padding rows rewrite row 0's K/V
        for i, layer in enumerate(self.layers):
            q, k, v, _ = layer.vlm.pre_attention(x, NO_MODULATION)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            kw, vw = k.reshape(b * s, hkv, d), v.reshape(b * s, hkv, d)
            if src is not None:
                kw, vw = kw.index_select(0, src), vw.index_select(0, src)
            pool_k[i].index_copy_(0, write, kw)
            pool_v[i].index_copy_(0, write, vw)
            kc = pool_k[i].index_select(0, gather).view(b, t, hkv, d)
            vc = pool_v[i].index_select(0, gather).view(b, t, hkv, d)
            x = layer.vlm.post_attention(x, attend(q, kc, vc, mask, bias), None, NO_MODULATION)
        hidden, _ = self.norm(x[:, -1])
        return hidden

    def untie_text_head(self, weight: Tensor) -> None:
        """Decode text through ``weight`` [vocab, W] instead of the embedding (prompts still embed with it)."""
        if weight.shape != self.embed_tokens.weight.shape:
            raise ValueError(f"lm_head must be {tuple(self.embed_tokens.weight.shape)}, got {tuple(weight.shape)}")
        head = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
        head.weight = nn.Parameter(weight, requires_grad=False)
        self.lm_head = head
        if is_packed(self) and can_pack(weight):  # packed before: pack the new head instead
            set_packed(self, weight)

    def pack_decode_weights(self, limit_bytes: int = PACK_LIMIT_BYTES) -> int:
        """Pack the decode step's weights (every backbone layer's and the text head's) for oneDNN, where the
        model is bfloat16 on a CPU and the copies take at most ``limit_bytes``; returns the bytes added (0:
        nothing packed, or packed already). Only products inside ``packed_decode.packed_products`` use them.
        The copies are taken now and do not follow later changes of the weights: pack once they are final
        (an ``Engine`` packs at its creation; training keeps float32, which is never packed)."""
        experts = [layer.vlm for layer in self.layers]
        head = self.text_head_weight
        head_bytes = head.numel() * head.element_size() if can_pack(head) and not is_packed(self) else 0
        if head_bytes + linear_bytes(experts) > limit_bytes:
            return 0
        return pack_linears(experts) + (set_packed(self, head) if head_bytes else 0)

    @property
    def text_head_weight(self) -> Tensor:
        return self.lm_head.weight if self.lm_head is not None else self.embed_tokens.weight

    def lm_logits(self, hidden: Tensor) -> Tensor:
        """hidden [..., W] → logits [..., vocab] through the text head (the tied embedding unless untied)."""
        packed = packed_copy(self, hidden)
        if packed is not None:
            return packed_linear(hidden.to(self.dtype), packed)
        return F.linear(hidden.to(self.dtype), self.text_head_weight)

    @torch.inference_mode()
    def greedy_tokens(self, hidden: Tensor) -> Tensor:
        """Greedy next tokens [B]: the index of the largest logit (no softmax needed).

        ``max(dim).indices`` rather than ``argmax``: on CPU the bfloat16 argmax kernel is ~4x slower, and over
        a 257k vocabulary that is a sixth of a decode step. Both return the first maximal index.
        """
        return self.lm_logits(hidden).max(dim=-1).indices

    # ------------------------------------------------------------------------------- uncached reference path
    @torch.inference_mode()
    def joint_velocity(self, images: Tensor, image_mask: Tensor, tokens: Tensor, x_t: Tensor, time: float) -> Tensor:
        """One full joint forward of prefix and action tokens, no cache: both experts in every layer.

        The reference the cached path is tested against. x_t [H, A] → velocity [H, A] (float32).
        """
        xp, n_img = self.embed_prefix(images, image_mask, tokens)
        tp, h = xp.shape[1], x_t.shape[0]
        mods = self._action_modulations(torch.full((1,), time, device=self.device))[0]
        xs = self._embed_actions(x_t.to(self.device).unsqueeze(0))
        total = tp + h
        mask = torch.zeros(total, total, dtype=torch.bool, device=self.device)
        mask[:tp, :tp] = self.prefix_mask(n_img, tp - n_img)
        mask[tp:, :] = True  # action tokens see the whole prefix and each other; the prefix never sees them
        mask = mask.unsqueeze(0)
        cos, sin = self.rope.cos_sin(torch.arange(total, device=self.device).unsqueeze(0), self.dtype)
        for i, layer in enumerate(self.layers):
            xp, xs = layer.joint(xp, xs, layer_modulations(mods, i), cos, sin, mask)
        xs, _ = self.action_norm(xs, mods[-1:])
        return self._velocity(xs)[0]

    @torch.inference_mode()
    def sample_actions_uncached(
        self, images: Tensor, image_mask: Tensor, tokens: Tensor, noise: Tensor, num_steps: int | None = None
    ) -> Tensor:
        """Euler sampling where every step recomputes the prefix jointly (the slow reference)."""
        steps = num_steps or self.config.num_denoise_steps
        x_t = noise.to(self.device, torch.float32)
        dt = -1.0 / steps
        for time in flow_times(steps).tolist():
            x_t = x_t + dt * self.joint_velocity(images, image_mask, tokens, x_t, time)
        return x_t


def pad_prefixes(prefix_k: Sequence[Tensor], prefix_v: Sequence[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """Prefixes [L, T_b, Hkv, D] → right-padded keys and values [L, B, T_max, Hkv, D] and the additive key bias
    [B, 1, 1, T_max] (0 on each prefix's own slots, -inf on its padding) that attention adds to its scores."""
    lengths = [k.shape[1] for k in prefix_k]
    first, t_max = prefix_k[0], max(lengths)
    shape = (first.shape[0], len(lengths), t_max, *first.shape[2:])
    pk = first.new_zeros(shape)
    pv = first.new_zeros(shape)
    bias = torch.zeros(len(lengths), 1, 1, t_max, dtype=torch.float32, device=first.device)
    for b, (k, v, t) in enumerate(zip(prefix_k, prefix_v, lengths)):
        pk[:, b, :t].copy_(k)
        pv[:, b, :t].copy_(v)
        bias[b, ..., t:] = float("-inf")
    return pk, pv, bias


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
