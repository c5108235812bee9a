"""A compiled function that a later start loads instead of tracing again: Dynamo's ahead-of-time compile
(``torch.compile(fn, fullgraph=True).aot_compile``, torch 2.13) saved to disk (``compiled_store``).

A warm start through inductor's caches alone still runs Dynamo over the function (18 unrolled layers for the
action network) and AOTAutograd before the cache lookups; that was most of a warm start. An AOT-compiled
function is Dynamo's output itself — the transformed bytecode, its guards and the bundled AOTAutograd/inductor
code — so loading it skips all tracing (docs/performance.md, Start-up, for the figures).

* One function can need several graphs (a single camera specializes the vision block's attention; the batched
  prefill has one for equal and one for unequal camera counts): each is a *variant* with its own guards, tried
  in order as Dynamo tries its cache entries. A call that no variant accepts compiles a new one (at start-up,
  from the warm-ups) and adds it to the file.
* Guards are built in the calling context (inference mode or autograd), so a file's variants are loaded at the
  function's first call, in that call's context.
* Whatever goes wrong with the artefact (a save that fails, a variant that does not load) is logged and the
  function falls back to the plain ``torch.compile`` path, with inductor's caches: slower to start, same
  results. ``OXYGEN_ROS_AOT_ARTEFACTS=0`` turns artefacts off (``oxygen-bench --startup`` compares both).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # torch._dynamo takes seconds to import: only a process that compiles pays for it
    from torch._dynamo.aot_compile import AOTCompiledFunction

from oxygen_ros.model.backends.compiled_store import ArtefactFile, artefact_key

log = logging.getLogger(__name__)

COUNTERS = "oxygen_aot"  # counters[COUNTERS]: variants "loaded" from a file, "compiled" and saved, "failed"


def aot_counters() -> Any:
    """torch._dynamo's counters of this module's variants (``loaded``, ``compiled``, ``failed``)."""
    from torch._dynamo.utils import counters

    return counters[COUNTERS]


def artefacts_enabled() -> bool:
    return os.environ.get("OXYGEN_ROS_AOT_ARTEFACTS", "1") != "0"


# What ``torch._dynamo.mark_dynamic`` and its kin set on a tensor. A loaded variant's guards were rebuilt
# without them and refuse a tensor that carries any ("present at runtime, absent at compile time"); a variant
# compiled in this process accepts a tensor without them. The dynamic dimensions are in the compiled graph
# and its shape guards, so the marks are taken off for the variants' guards and put back for tracing.
_MARKS = ("_dynamo_dynamic_indices", "_dynamo_weak_dynamic_indices", "_dynamo_unbacked_indices",
          "_dynamo_strict_unbacked_indices", "_dynamo_static_indices", "_has_dynamo_dim_marking")


def _aot_function() -> Any:
    from torch._dynamo.aot_compile import AOTCompiledFunction

    return AOTCompiledFunction


def _accepts(variant: AOTCompiledFunction, args: tuple) -> bool:
    """Whether the variant's guards accept ``args``, checked without the marks (kept for tracing)."""
    taken = []
    for a in args:
        if isinstance(a, torch.Tensor) and (found := [n for n in _MARKS if n in a.__dict__]):
            taken.append((a, {n: a.__dict__.pop(n) for n in found}))
    try:
        return variant.guard_check(*args)
    finally:
        for tensor, marks in taken:
            tensor.__dict__.update(marks)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


class AotCompiledFunction:
    """``fn`` compiled by inductor (``torch.compile(fullgraph=True, dynamic=False)``, dynamic dimensions from
    ``mark_dynamic`` on the arguments) whose compiled variants are saved to and loaded from one artefact file.
    ``leading`` arguments (the model) are passed before the caller's."""

    def __init__(self, name: str, fn: Callable, leading: tuple[Any, ...], options: dict | None,
                 key_parts: dict[str, object], folder: Path | None = None) -> None:
        self.name = name
        self._leading = leading
        self._lazy = torch.compile(fn, fullgraph=True, dynamic=False, options=options)
        key = artefact_key(name=name, function=f"{fn.__module__}.{fn.__qualname__}", options=options, **key_parts)
        self._file: ArtefactFile | None = ArtefactFile(name, key, folder) if artefacts_enabled() else None
        self._variants: list[AOTCompiledFunction] = []
        self._stored = 0  # how many of the file's variants were looked at (loaded or unloadable)
        self._unloadable: set[bytes] = set()  # stored variants that did not load: dropped at the next save
        self._lock = threading.Lock()

    @property
    def path(self) -> Path | None:
        return None if self._file is None else self._file.path

    def __call__(self, *args: Any) -> Any:
        args = (*self._leading, *args)
        for variant in self._variants:
            if _accepts(variant, args):
                return variant.fn(*args)
        variant = self._variant_for(args) if self._file is not None else None
        return self._lazy(*args) if variant is None else variant.fn(*args)

    def _variant_for(self, args: tuple) -> AOTCompiledFunction | None:
        """A variant that accepts ``args``: from the file, else compiled now and saved; None where the
        artefact path failed (then the plain compiled path serves)."""
        with self._lock:
            if (found := self._load_new(args)) is not None:
                return found
            assert self._file is not None
            with self._file.locked(lambda: log.info("%s: another process is compiling it; waiting", self.name)):
                if (found := self._load_new(args)) is not None:  # what that process wrote
                    return found
                return self._compile_and_save(args)

    def _load_new(self, args: tuple) -> AOTCompiledFunction | None:
        """Load the file's variants not loaded yet; the first that accepts ``args``."""
        assert self._file is not None
        stored = self._file.read()
        if len(stored) < self._stored:  # replaced by a shorter file (a corrupt one rewritten): start over
            self._stored = 0
        found = None
        for data in stored[self._stored:]:
            try:
                variant = _aot_function().deserialize(data)
            except Exception as exc:  # noqa: BLE001 - a variant from another torch build, a damaged pickle ...
                log.warning("%s: a compiled variant in %s did not load (%s); compiling again, and the next save "
                            "drops it", self.name, self._file.path, _first_line(exc))
                aot_counters()["failed"] += 1
                self._unloadable.add(data)
                continue
            self._variants.append(variant)
            aot_counters()["loaded"] += 1
            if found is None and _accepts(variant, args):
                found = variant
        self._stored = len(stored)
        return found

    def _compile_and_save(self, args: tuple) -> AOTCompiledFunction | None:
        assert self._file is not None
        try:
            variant = self._lazy.aot_compile((args, {}))
            data = _aot_function().serialize(variant).serialized_data
        except Exception as exc:  # noqa: BLE001 - an op or backend without serializable output: plain compile
            log.warning("%s: ahead-of-time compiling failed (%s); compiling through inductor's caches "
                        "instead (slower start-up, same results)", self.name, _first_line(exc))
            aot_counters()["failed"] += 1
            self._file = None
            return None
        self._variants.append(variant)
        aot_counters()["compiled"] += 1
        stored = [d for d in self._file.read() if d not in self._unloadable]
        try:
            self._file.write([*stored, data])
            self._stored = len(stored) + 1
        except OSError as exc:
            log.warning("%s: could not save the compiled artefact %s (%s); the next start compiles again",
                        self.name, self._file.path, exc)
        return variant
