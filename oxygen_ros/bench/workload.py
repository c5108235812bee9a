"""The benchmark's model and inputs: identical in every worker process (same seeds)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from oxygen_ros.engine import Engine, FrameInput, TextTask
from oxygen_ros.model.config import BENCH, ModelConfig, preset
from oxygen_ros.model.vla import Pi05Model

PROMPT_TOKENS = 13  # with two cameras: 2 x 256 + 13 = 525 valid prefix positions, as in the reference run
CONTINUATION = (13_527, 235_292, 235_248)  # a few fixed token ids standing for " Subtask:"
NUM_FRAME_INPUTS = 8  # distinct observations cycled through


@dataclass(frozen=True)
class Workload:
    preset: str
    device: str
    dtype: str
    horizon: int = 10
    denoise_steps: int = 10
    kv_budget_mb: int = 96
    seed: int = 0

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.dtype == "bfloat16" else torch.float32

    def model_config(self) -> ModelConfig:
        return preset(self.preset).replace(action_horizon=self.horizon, num_denoise_steps=self.denoise_steps)

    def build_model(self) -> Pi05Model:
        torch.manual_seed(self.seed)
        return Pi05Model(self.model_config()).to(device=self.device, dtype=self.torch_dtype).eval()

    def frames(self, config: ModelConfig) -> list[FrameInput]:
        g = torch.Generator().manual_seed(self.seed + 1)
        s = config.vision.image_size
        mask = torch.tensor([True, True, False][: config.num_image_slots])  # DROID-like: 2 cameras, 1 masked slot
        out = []
        for i in range(NUM_FRAME_INPUTS):
            images = (torch.rand(config.num_image_slots, 3, s, s, generator=g) * 2 - 1).to(self.device)
            tokens = torch.randint(4, config.vocab_size, (PROMPT_TOKENS,), generator=g)
            tokens[0] = config.bos_token_id
            out.append(FrameInput(images, mask.to(self.device), tokens.to(self.device), stamp_ns=i, frame_seq=i))
        return out

    def noise(self, config: ModelConfig, index: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(10_000 + index)
        return torch.randn(config.action_horizon, config.action_dim, generator=g)

    def engine(self, model: Pi05Model, decode_len: int) -> Engine:
        continuation = tuple(t % model.config.vocab_size for t in CONTINUATION)  # valid for small vocabularies too
        task = TextTask("language", continuation, every_n_frames=1, max_tokens=max(decode_len, 1))
        return Engine(model, [task], kv_budget_bytes=self.kv_budget_mb << 20, ignore_eos=True, seed=self.seed)


def bf16_supported(device: str) -> bool:
    """bfloat16 where the hardware runs it natively: CUDA, or a CPU with AVX512-BF16 / AMX."""
    if device.startswith("cuda"):
        return True
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


__all__ = ["BENCH", "Workload", "bf16_supported"]
