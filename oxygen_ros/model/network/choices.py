"""The names of the network's and its back-ends' options, without torch: the configuration and the commands'
``--help`` read them here; the modules that implement each option import them from here."""

from __future__ import annotations

ACTION_BACKENDS = ("eager", "compiled", "cuda_graph", "auto")  # model.backends.action_sampler
PREFILL_BACKENDS = ("eager", "compiled", "auto")  # model.backends.compiled_prefill
# How an engine packs its decode weights: "auto" where the copies fit, "on" whatever they take, "off" never
# (model.network.packed_decode).
PACK_CHOICES = {"auto": None, "on": True, "off": False}
RESIZE_MODES: tuple[str, ...] = ("pil", "bilinear")  # model.network.preprocess
# The weights' dtype: "auto" = bfloat16 where the device runs it natively, else float32 (model.network.cpu_bfloat16).
DTYPE_CHOICES = ("auto", "float32", "bfloat16")
SCHEDULES = ("exp", "linear", "ones", "zeros")  # real-time chunking's prefix weights (model.network.rtc)
