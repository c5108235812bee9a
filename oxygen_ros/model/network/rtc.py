"""Real-time chunking (Black, Galliker, Levine 2025): guided denoising that inpaints the overlap with the
previous, still-executing chunk.

While a new chunk is computed from an observation, the robot keeps executing the previous chunk. The new
chunk's first actions therefore overlap actions that run (or have already run) anyway. RTC samples the new
chunk so that this overlap agrees with the previous chunk: at every Euler step the velocity is corrected by
pseudo-inverse guidance (ΠGDM) toward the previous chunk, weighted per action by soft prefix weights.

Conventions (this project = openpi / OxyGen): flow time t runs from 1 (noise) to 0 (actions), the model
predicts v = noise − actions, Euler steps x ← x + dt·v with dt < 0. Then

* denoised estimate   x̂₀(x_t) = x_t − t·v(x_t, t)
* guidance            g = (∂x̂₀/∂x_t)ᵀ · [W ⊙ (y − x̂₀)]   (one vector-Jacobian product through the expert)
* guided velocity     v − min(c·inv_r², β) · g,  c = t/(1−t),  inv_r² = (t² + (1−t)²)/t²

as in OxyGen's ``sample_actions_rtc`` (JAX) and LeRobot's RTC processor (which writes the same weight in
τ = 1 − t). The VJP runs only through the action expert: the frame's prefix KV is read in place, never copied
or differentiated, and the weights stay frozen (they have ``requires_grad=False``), so no parameter gradient
is ever formed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from oxygen_ros.model.network.choices import SCHEDULES
from oxygen_ros.model.network.vla import DenoiseSchedule, Pi05Model, VelocityFn



def prefix_weights(delay: int, horizon_end: int, total: int, schedule: str = "exp") -> Tensor:
    """Per-action guidance weights [total] (float32).

    Actions before ``delay`` (they execute while the new chunk is computed) get weight 1; from ``delay`` to
    ``horizon_end`` (exclusive, the prefix-attention horizon) the weight decays — linearly, or along the
    paper's exponential curve w·(e^w − 1)/(e − 1) — and from ``horizon_end`` on it is 0. ``ones`` weights the
    whole overlap fully, ``zeros`` only the first ``delay`` actions. ``horizon_end`` wins when it is smaller
    than ``delay``. Example (delay 2, end 6, total 10, linear): 1 1 .8 .6 .4 .2 0 0 0 0.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown RTC schedule {schedule!r}; one of {list(SCHEDULES)}")
    if total < 1 or delay < 0 or horizon_end < 0:
        raise ValueError(f"need total >= 1, delay >= 0 and horizon_end >= 0 (got {total}, {delay}, {horizon_end})")
    end = min(horizon_end, total)
    start = min(delay, end)
    index = torch.arange(total, dtype=torch.float32)
    if schedule == "ones":
        weights = torch.ones(total)
    elif schedule == "zeros":
        weights = (index < start).float()
    else:
        weights = ((start - 1 - index) / (end - start + 1) + 1).clamp(0.0, 1.0)
        if schedule == "exp":
            weights = weights * torch.expm1(weights) / (math.e - 1)
    return torch.where(index >= end, torch.zeros(()), weights)


def guidance_weight(t: float, beta: float) -> float:
    """min(c·inv_r², β) at flow time t (1 = noise); β at t = 1 where c is infinite, 0 at t = 0."""
    if t >= 1.0:
        return beta
    if t <= 0.0:
        return 0.0
    c = t / (1.0 - t)
    inv_r2 = (t * t + (1.0 - t) ** 2) / (t * t)
    return min(c * inv_r2, beta)


def denoised_vjp(
    model: Pi05Model,
    x_t: Tensor,
    prefix_k: Tensor,
    prefix_v: Tensor,
    schedule: DenoiseSchedule,
    step: int,
    cotangent_fn: Callable[[Tensor], Tensor],
    network: VelocityFn | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Velocity, denoised estimate and the VJP of x̂₀ = x_t − t·v(x_t) at one Euler step.

    ``cotangent_fn(x̂₀)`` gives the vector multiplied with the Jacobian (it sees x̂₀ detached). x_t [1, H, A];
    prefix_k/v [L, 1, T, Hkv, D]. ``network``: :meth:`Pi05Model.expert_network` or its compiled form (which
    then differentiates through inductor's compiled backward). Returns (v, x̂₀, (∂x̂₀/∂x_t)ᵀ·cotangent), all
    detached.
    """
    t = schedule.times[step]
    with torch.inference_mode(False), torch.enable_grad():
        x = x_t.detach().clone().requires_grad_(True)
        velocity = (network or model.expert_network)(x, prefix_k, prefix_v, schedule.cos, schedule.sin,
                                                      schedule.mods[step])
        x0 = x - t * velocity
        cotangent = cotangent_fn(x0.detach())
        (vjp,) = torch.autograd.grad(x0, x, cotangent)
    return velocity.detach(), x0.detach(), vjp


def sample_actions_rtc(
    model: Pi05Model,
    prefix_k: Tensor,
    prefix_v: Tensor,
    noise: Tensor,
    target: Tensor,
    weights: Tensor,
    beta: float,
    num_steps: int | None = None,
    network: VelocityFn | None = None,
) -> Tensor:
    """Euler sampling guided toward ``target`` (the previous chunk, shifted so row i is the action the new
    chunk's row i replaces) with per-action ``weights`` [H] and maximum guidance weight ``beta``.

    prefix_k/v [L, T, Hkv, D] are read, never written; noise/target [H, A] → [H, A] float32 (normalized).
    ``network`` replaces the eager expert network (``compiled.FusedActionSampler.sample_rtc``).
    """
    if target.shape != noise.shape or weights.shape != noise.shape[:1]:
        raise ValueError(f"target {tuple(target.shape)} and weights {tuple(weights.shape)} must match noise {tuple(noise.shape)}")
    # Outside inference mode even when the caller is in it: tensors made in inference mode (the RoPE tables,
    # the modulations) cannot be saved for the backward pass of the VJP.
    with torch.inference_mode(False):
        schedule = model.denoise_schedule(prefix_k.shape[1], noise.shape[0], num_steps)
        pk, pv = prefix_k.unsqueeze(1), prefix_v.unsqueeze(1)
        y = target.to(model.device, torch.float32).unsqueeze(0)
        w = weights.to(model.device, torch.float32).view(1, -1, 1)
        x_t = noise.to(model.device, torch.float32).unsqueeze(0)
        for step in range(schedule.steps):
            velocity, _, correction = denoised_vjp(model, x_t, pk, pv, schedule, step, lambda x0: (y - x0) * w,
                                                   network)
            guided = velocity - guidance_weight(schedule.times[step], beta) * correction
            x_t = x_t + schedule.dt * guided
        return x_t[0]
