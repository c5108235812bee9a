"""The benchmark's model and inputs: identical in every worker process (same seeds)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from oxygen_ros.engine import Engine, FrameInput, TextTask
from oxygen_ros.engine.engine import EngineLanes
from oxygen_ros.model.backends.action_sampler import make_action_sampler
from oxygen_ros.model.backends.compiled import ActionSampler, warm_up_rtc
from oxygen_ros.model.backends.compiled_prefill import Prefiller, make_prefiller
from oxygen_ros.model.network.config import BENCH, ModelConfig, preset
from oxygen_ros.model.network.cpu_bfloat16 import resolve_dtype
from oxygen_ros.model.network.vla import Pi05Model


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
    actions: str = "auto"  # the action chunk: compiled / cuda_graph / eager; auto = cuda_graph on CUDA, else compiled
    prefill: str = "auto"  # the prefill: compiled / eager; auto = compiled
    lanes: bool = True  # action chunk and an overlapped decode step on worker threads of their own

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.dtype == "bfloat16" else torch.float32

    def model_config(self) -> ModelConfig:
        return preset(self.preset).replace(action_horizon=self.horizon, num_denoise_steps=self.denoise_steps)

    def build_model(self) -> Pi05Model:
        """Random weights (same seed in every process), initialized on the device itself (a full pi0.5 would
        take a minute to initialize on the CPU)."""
        torch.manual_seed(self.seed)
        with torch.device(self.device):
            model = Pi05Model(self.model_config())
        return model.to(dtype=self.torch_dtype).eval()

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

    def engine(self, model: Pi05Model, decode_len: int, runtime: "BenchRuntime | None" = None,
               eager_prefill: bool = False) -> Engine:
        """An engine with the workload's text task; ``runtime`` gives it the shared sampler, prefill and lanes
        (``eager_prefill``: all of them but the eager prefill)."""
        continuation = tuple(t % model.config.vocab_size for t in CONTINUATION)  # valid for small vocabularies too
        task = TextTask("language", continuation, every_n_frames=1, max_tokens=max(decode_len, 1))
        return Engine(model, [task], kv_budget_bytes=self.kv_budget_mb << 20, ignore_eos=True, seed=self.seed,
                      action_sampler=runtime.sampler if runtime else None, lanes=runtime.lanes if runtime else None,
                      prefiller=runtime.prefiller if runtime and not eager_prefill else None,
                      decode_graphs=self.decode_graphs)

    def decoding_engine(self, model: Pi05Model, rows: int, steps: int) -> Engine:
        """An engine with ``rows`` live requests that outlast ``steps`` more decode steps (prompts fed)."""
        engine = self.engine(model, decode_len=steps + 8)
        frame = self.frames(model.config)[0]
        prefix, _ = engine.prefill(frame)
        engine.start_requests(prefix, frame, engine.tasks * rows)
        engine.kv.release(prefix)
        if engine.live_requests != rows:
            raise RuntimeError(f"only {engine.live_requests} of {rows} requests fit the KV budget")
        engine.decode_step()  # feeds the continuation prompts
        return engine

    @property
    def decode_graphs(self) -> bool:
        """Decode steps from CUDA graphs wherever the action chunk uses one (CUDA, actions auto/cuda_graph)."""
        return self.device.startswith("cuda") and self.actions in ("auto", "cuda_graph")


class BenchRuntime:
    """What every engine of a worker process shares: the action sampler and the prefill (each compiled once)
    and the lanes."""

    def __init__(self, workload: Workload, model: Pi05Model, progress=print, rtc: bool = False) -> None:  # noqa: ANN001
        self.lanes = EngineLanes(workload.device) if workload.lanes else None
        # ``rtc``: the real-time-chunking path compiled too (the timing worker's parts time it: A_rtc).
        build = lambda: warm_up_rtc(make_action_sampler(model, workload.actions, progress), rtc)  # noqa: E731
        # Compiled on the action lane: the thread whose settings it will run with.
        self.sampler: ActionSampler = self.lanes.action.run(build) if self.lanes else build()
        self.compile_s = getattr(self.sampler, "compile_s", None)
        self.rtc_compile_s = getattr(self.sampler, "rtc_compile_s", None)
        self.fused = bool(getattr(self.sampler, "fused", False))
        graphed = getattr(self.sampler, "replays_cuda_graphs", False)
        self.path = ("cuda_graph_compiled" if self.fused else "cuda_graph") if graphed else ("compiled" if self.fused else "eager")
        # The prefill runs on the calling thread: compiled there.
        self.prefiller: Prefiller = make_prefiller(model, workload.prefill, progress)
        self.prefill_compile_s = getattr(self.prefiller, "compile_s", None)
        self.prefill_fused = bool(getattr(self.prefiller, "fused", False))

    def close(self) -> None:
        if self.lanes:
            self.lanes.close()


def bf16_supported(device: str) -> bool:
    """bfloat16 where the hardware runs it natively: CUDA, or a CPU with AVX512-BF16 / AMX whose oneDNN has its
    bfloat16 path (the runtime's dtype ``auto``)."""
    return resolve_dtype("auto", device) == "bfloat16"


__all__ = ["BENCH", "Workload", "bf16_supported"]
