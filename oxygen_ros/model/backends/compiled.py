"""The action chunk without per-op overhead: the denoising network compiled by ``torch.compile`` (inductor).

An eager action chunk is about 12k small ops (10 Euler steps x 18 layers of norms, projections, RoPE and
attention on 10 tokens), so on a CPU it is bound by per-op dispatch, not arithmetic. Compiling one
evaluation of the network (:meth:`Pi05Model.expert_network`, all layers) fuses the elementwise work between
the matrix products into a few generated C++ loops. The Euler loop around it stays eager (10 calls of the
compiled step per chunk). Real-time chunking (``sample_rtc``) steps through a compiled form of the same
network that autograd differentiates: inductor compiles its forward and the backward of its vector-Jacobian
product (AOTAutograd), at start-up (``warm_up_rtc``) like the plain chunk.

* Compilation happens in :meth:`FusedActionSampler.warm_up` (start-up, with a progress line), never on the
  control path. The prefix length is a dynamic dimension, so one compilation serves every prompt length.
* Every compiled function is saved ahead of time (``compiled_aot``: Dynamo's output with its guards and the
  compiled code, keyed by model configuration, source, torch version and machine) under
  ``TORCHINDUCTOR_CACHE_DIR`` (by default ``~/.cache/oxygen_ros/inductor``): a later start-up loads it without
  tracing. The weights stay inputs of the compiled graph, not frozen constants, so the artefact and inductor's
  own graph caches (FX graph and AOTAutograd, the fallback) hold the whole compiled network. Frozen weights
  (``freezing``) packed for MKL are not picklable, so inductor refused to cache such a graph and every start
  compiled from scratch; freezing gave no measurable speed-up of the chunk here (README, Performance).
* If compiling fails (no C++ compiler, an unsupported op), one warning is logged and the eager network is
  used from then on. Results are the same up to floating-point rounding (tests bound the difference).

``plain_sampler`` is the eager path: ``Pi05Model.sample_actions`` unchanged, bit for bit.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor

from oxygen_ros.model.backends.compiled_aot import AotCompiledFunction, aot_counters
from oxygen_ros.model.network.rtc import sample_actions_rtc
from oxygen_ros.model.network.vla import Pi05Model, VelocityFn

log = logging.getLogger(__name__)

class ActionSampler(Protocol):
    """prefix_k/v [L, T, Hkv, D] (read only), noise [H, A] → actions [H, A] float32 (normalized)."""

    def __call__(self, prefix_k: Tensor, prefix_v: Tensor, noise: Tensor) -> Tensor: ...


def default_cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "oxygen_ros" / "inductor"


def use_persistent_cache() -> None:
    """Point inductor's on-disk caches at a persistent folder unless the user chose one."""
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        path = default_cache_dir()
        path.mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)


def compiler_available() -> str | None:
    """Why inductor cannot compile for the CPU here, or None when it can: it builds its kernels with a C++
    compiler against Python's headers (Debian/Ubuntu: ``apt install g++ python3-dev``)."""
    import shutil
    import sysconfig

    cxx = os.environ.get("CXX") or "g++"
    if not shutil.which(cxx):
        return f"no C++ compiler ({cxx}) on PATH"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python headers (Python.h) for this interpreter"
    return None


class CompiledPath:
    """A model function compiled by ``torch.compile`` (inductor) at start-up, with eager as the fallback: when
    compiling is impossible or fails, one warning names why and the eager function serves from then on."""

    what = "model"  # what the log lines call it

    def __init__(self, model: Pi05Model, progress: Callable[[str], None] | None = None) -> None:
        self.model = model
        self.progress = progress or (lambda message: log.info("%s", message))
        self.compile_s: float | None = None  # wall time of the compiling warm-up call
        self.failure: str | None = None  # why the eager function is used instead
        self._compiled = None
        reason = compiler_available() if model.device.type == "cpu" else None
        if reason:
            self._fail(reason)
            return
        use_persistent_cache()
        self._compiled = self._build()

    def _build(self):  # noqa: ANN202 - what the subclass compiles (lazily: compiling happens on the first call)
        raise NotImplementedError

    def compile(self, name: str, fn: Callable, *leading: object) -> Callable:
        """``fn`` compiled, called with ``leading`` (the model, where ``fn`` takes it) before the caller's
        arguments; a later start loads it from its ahead-of-time artefact (``compiled_aot``)."""
        # On a CPU, inductor's C++ wrapper calls the ~400 kernels and matrix products of one network
        # evaluation from C++ instead of generated Python (measured: the chunk 126 → 113 ms, bench preset).
        options = {"cpp_wrapper": True} if self.model.device.type == "cpu" else None
        key = {"config": repr(self.model.config), "dtype": str(self.model.dtype), "device": self.model.device.type}
        return AotCompiledFunction(name, fn, leading, options, key)

    @property
    def fused(self) -> bool:
        return self.failure is None and self._compiled is not None

    def _fail(self, reason: str | BaseException) -> None:
        if isinstance(reason, BaseException):
            reason = f"{type(reason).__name__}: {str(reason).splitlines()[0] if str(reason) else ''}"
        self.failure = reason
        self._compiled = None
        log.warning("%s: compiling failed (%s); using the eager network (slower, same results)", self.what, reason)

    def _timed_warm_up(self, calls: Callable[[], None], what: str | None = None) -> float:
        """Run the compiling calls with progress lines naming ``what`` (default: this path); returns their
        seconds (0 when not compiling). The path's own warm-up (no ``what``) sets ``compile_s``."""
        if self._compiled is None:
            return 0.0
        label = what or self.what
        self.progress(f"{label}: compiling, or loading what an earlier start compiled ...")
        aot = dict(aot_counters())
        t0 = time.perf_counter()
        calls()
        seconds = time.perf_counter() - t0
        if what is None:
            self.compile_s = seconds
        if self.fused:
            compiled, loaded = (aot_counters()[k] - aot.get(k, 0) for k in ("compiled", "loaded"))
            how = f"loaded in {seconds:.1f} s (compiled by an earlier start)" if loaded and not compiled else \
                f"compiled in {seconds:.1f} s (saved for later starts)"
            self.progress(f"{label}: {how}")
        return seconds


# Guards built with recursive dict tags skip the check of every module and parameter of the network while none
# of their attribute dicts changed (measured: 772 → 280 µs per network call).
def fast_guards():  # noqa: ANN201 - a context manager
    return torch._dynamo.config.patch(use_recursive_dict_tags_for_guards=True)


def expert_network(model: Pi05Model, *args: Tensor | None) -> Tensor:
    """:meth:`Pi05Model.expert_network` with the model as an argument: what is compiled (its weights become
    graph inputs, and an ahead-of-time artefact holds no module)."""
    return model.expert_network(*args)


class FusedActionSampler(CompiledPath):
    """Samples action chunks through the compiled denoising network, with eager as the fallback."""

    what = "action chunk"

    def __init__(self, model: Pi05Model, progress: Callable[[str], None] | None = None) -> None:
        self._compiled_batch: VelocityFn | None = None
        self._compiled_rtc: VelocityFn | None = None
        self.rtc_compile_s: float | None = None  # wall time of warm_up_rtc
        super().__init__(model, progress)
        if self._compiled is not None:
            # A batch of chunks (several robots) is a graph of its own, compiled on first use: batch size and
            # prefix length are dynamic there, so one compilation serves every number of robots from 2 up.
            self._compiled_batch = self.compile("action chunk batch", expert_network, model)
            # Real-time chunking differentiates the network: a forward that saves for backward, and the backward.
            self._compiled_rtc = self.compile("real-time chunking", expert_network, model)

    def _build(self) -> VelocityFn:
        return self.compile("action chunk", expert_network, self.model)

    def _fail(self, reason: str | BaseException) -> None:
        self._compiled_batch = None
        self._compiled_rtc = None
        super()._fail(reason)

    def network(self, x_t: Tensor, prefix_k: Tensor, prefix_v: Tensor, cos: Tensor, sin: Tensor,
                mods: Tensor, prefix_bias: Tensor | None = None) -> Tensor:
        """One evaluation of the compiled network (a :data:`VelocityFn`; no eager fallback here): what
        :meth:`__call__` steps with, and what a CUDA graph records (``cuda_graphs.record_action_graph``)."""
        assert self._compiled is not None
        # prefix_k/v [L, 1, T, Hkv, D] are contiguous (see __call__) and their length is dynamic: one
        # compilation for every KV pool and prompt, and two tensors to guard per call, not one per layer. A
        # prefix padded to a static length (a CUDA graph's buffers, whose bias hides the padding) keeps its size.
        if prefix_bias is None:
            for t in (prefix_k, prefix_v):
                torch._dynamo.mark_dynamic(t, 2)
        # The first step's x_t comes from outside inference mode; a clone makes every call's input alike.
        return self._compiled(x_t.clone(), prefix_k, prefix_v, cos, sin, mods, prefix_bias)

    def _call_compiled_batch(self, x_t: Tensor, prefix_k: Tensor, prefix_v: Tensor, cos: Tensor, sin: Tensor,
                             mods: Tensor, prefix_bias: Tensor | None = None) -> Tensor:
        assert self._compiled_batch is not None and prefix_bias is not None
        for t in (prefix_k, prefix_v):  # [L, B, T, Hkv, D]
            torch._dynamo.mark_dynamic(t, 1)
            torch._dynamo.mark_dynamic(t, 2)
        torch._dynamo.mark_dynamic(prefix_bias, 0)
        torch._dynamo.mark_dynamic(prefix_bias, 3)
        for t in (cos, sin):
            torch._dynamo.mark_dynamic(t, 0)
        x_t = x_t.clone()
        torch._dynamo.mark_dynamic(x_t, 0)
        return self._compiled_batch(x_t, prefix_k, prefix_v, cos, sin, mods, prefix_bias)

    def sample_batch(self, prefix_k: list[Tensor], prefix_v: list[Tensor], noise: Tensor) -> Tensor:
        """Chunks for B >= 2 prefixes at once (:meth:`Pi05Model.sample_actions_batch`) through the compiled
        network; the eager one where compiling failed."""
        if self._compiled_batch is None:
            return self.model.sample_actions_batch(prefix_k, prefix_v, noise)
        try:
            with fast_guards():
                return self.model.sample_actions_batch(prefix_k, prefix_v, noise, network=self._call_compiled_batch)
        except Exception as exc:  # noqa: BLE001 - as in __call__: fall back to eager, once
            self._fail(exc)
            return self.model.sample_actions_batch(prefix_k, prefix_v, noise)

    def _call_compiled_rtc(self, x_t: Tensor, prefix_k: Tensor, prefix_v: Tensor, cos: Tensor, sin: Tensor,
                           mods: Tensor, prefix_bias: Tensor | None = None) -> Tensor:
        assert self._compiled_rtc is not None and prefix_bias is None
        for t in (prefix_k, prefix_v):  # [L, 1, T, Hkv, D], contiguous (see sample_rtc)
            torch._dynamo.mark_dynamic(t, 2)
        return self._compiled_rtc(x_t, prefix_k, prefix_v, cos, sin, mods)

    def sample_rtc(self, prefix_k: Tensor, prefix_v: Tensor, noise: Tensor, target: Tensor, weights: Tensor,
                   beta: float) -> Tensor:
        """A real-time-chunking chunk (:func:`rtc.sample_actions_rtc`) through the compiled network and its
        compiled backward; the eager network where compiling failed. Same arguments and result."""
        if self._compiled_rtc is None:
            return sample_actions_rtc(self.model, prefix_k, prefix_v, noise, target, weights, beta)
        # One contiguous copy per chunk, as in __call__, made outside inference mode: autograd saves the prefix
        # for the backward pass, which an inference tensor cannot be.
        with torch.inference_mode(False):
            prefix_k, prefix_v = (t.clone(memory_format=torch.contiguous_format) for t in (prefix_k, prefix_v))
        try:
            with fast_guards():
                return sample_actions_rtc(self.model, prefix_k, prefix_v, noise, target, weights, beta,
                                          network=self._call_compiled_rtc)
        except Exception as exc:  # noqa: BLE001 - as in __call__: fall back to eager, once
            self._fail(exc)
            return sample_actions_rtc(self.model, prefix_k, prefix_v, noise, target, weights, beta)

    def __call__(self, prefix_k: Tensor, prefix_v: Tensor, noise: Tensor) -> Tensor:
        if self._compiled is None:
            return self.model.sample_actions(prefix_k, prefix_v, noise)
        # One copy per chunk: a view of the KV pool [L, T, ...] has the pool's capacity in its layer stride,
        # which the compiled code would otherwise be specialized on.
        prefix_k, prefix_v = prefix_k.contiguous(), prefix_v.contiguous()
        try:
            with fast_guards():
                return self.model.sample_actions(prefix_k, prefix_v, noise, network=self.network)
        except Exception as exc:  # noqa: BLE001 - any compiler failure means: fall back to eager, once
            self._fail(exc)
            return self.model.sample_actions(prefix_k, prefix_v, noise)

    def warm_up(self, prefix_len: int = 0) -> float:
        """Compile now (start-up) on a blank prefix; returns the seconds it took (0 when not compiling)."""
        if self._compiled is None:
            return 0.0
        cfg, b = self.model.config, self.model.config.backbone
        t = prefix_len or cfg.tokens_per_image + 8
        shape = (b.depth, t + 5, b.num_kv_heads, b.head_dim)
        k = torch.zeros(shape, dtype=self.model.dtype, device=self.model.device)
        noise = torch.zeros(cfg.action_horizon, cfg.action_dim)

        def calls() -> None:
            self(k[:, :t], k[:, :t], noise)
            self(k[:, 2:t], k[:, 2:t], noise)  # another length and offset: served by the same compiled code

        return self._timed_warm_up(calls)

    def warm_up_rtc(self, prefix_len: int = 0) -> float:
        """Compile the real-time-chunking network and its backward now (start-up; once); returns the seconds."""
        if self._compiled_rtc is None or self.rtc_compile_s is not None:
            return 0.0
        cfg, b = self.model.config, self.model.config.backbone
        t = prefix_len or cfg.tokens_per_image + 8
        k = torch.zeros((b.depth, t + 5, b.num_kv_heads, b.head_dim), dtype=self.model.dtype, device=self.model.device)
        h, a = cfg.action_horizon, cfg.action_dim
        guide = (torch.zeros(h, a), torch.ones(h), 5.0)

        def calls() -> None:
            self.sample_rtc(k[:, :t], k[:, :t], torch.zeros(h, a), *guide)
            self.sample_rtc(k[:, 2:t], k[:, 2:t], torch.zeros(h, a), *guide)  # another length: the same code

        self.rtc_compile_s = self._timed_warm_up(calls, "real-time chunking")
        return self.rtc_compile_s


def warm_up_rtc(sampler: ActionSampler, rtc: bool = True) -> ActionSampler:
    """Compile a sampler's real-time-chunking path at start-up where it has one and ``rtc`` is on; returns it."""
    if rtc and isinstance(sampler, FusedActionSampler):
        sampler.warm_up_rtc()
    return sampler


def plain_sampler(model: Pi05Model) -> ActionSampler:
    return model.sample_actions
