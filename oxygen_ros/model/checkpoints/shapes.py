"""The sizes of a stack whose variant name the package does not know, read from the stored tensor shapes.

openpi fine-tunes may declare their own Gemma variant in config.json. Its sizes are in the weights: depth
from the layer indices, width and MLP size from the projections, heads from q/k projections. Shapes alone
cannot split ``heads x head_dim``; every Gemma variant openpi defines has one KV head, so the K projection's
output is taken as ``head_dim`` (a sidecar ``oxygen_config.json`` overrides it where that does not hold).
"""

from __future__ import annotations

import re
from typing import Callable, Mapping

# Our parameter names for each stack's layers (see key_maps._PREFIX_RULES).
STACK_PREFIX = {"backbone": "layers.{i}.vlm.", "expert": "layers.{i}.action."}


def stack_sizes(shapes: Mapping[str, tuple[int, ...]], stack: str) -> dict[str, int]:
    """``ExpertConfig`` fields of ``stack`` ("backbone" or "expert") from ``{our name: shape}``; raises
    ValueError naming what is missing."""
    pattern = re.compile(re.escape(STACK_PREFIX[stack]).replace(re.escape("{i}"), r"(\d+)"))
    indices = {int(m.group(1)) for name in shapes if (m := pattern.match(name))}
    if not indices:
        raise ValueError(f"no {stack} layers among the stored tensors")
    first = STACK_PREFIX[stack].format(i=0)

    def shape(suffix: str) -> tuple[int, ...]:
        if first + suffix not in shapes:
            raise ValueError(f"the {stack} has no {first + suffix} to read its size from")
        return shapes[first + suffix]

    q_out, width = shape("self_attn.q_proj.weight")
    kv_out, _ = shape("self_attn.k_proj.weight")
    mlp_dim, _ = shape("mlp.gate_proj.weight")
    if q_out % kv_out:
        raise ValueError(f"the {stack}'s query size {q_out} is not a multiple of its key size {kv_out}")
    return {"width": width, "depth": max(indices) + 1, "mlp_dim": mlp_dim, "num_heads": q_out // kv_out,
            "num_kv_heads": 1, "head_dim": kv_out}  # fmt: skip


def sizes_from_tensors(
    keys: list[str], shape_of: Callable[[str], tuple[int, ...]], native: Callable[[str], str | None], stacks: list[str]
) -> dict[str, dict[str, int]]:
    """``{stack: sizes}`` for each of ``stacks``; ``native`` maps a stored key to our name (None: not a param)."""
    shapes = {name: shape_of(key) for key in keys if (name := native(key)) is not None and name.startswith("layers.0.")}
    for key in keys:  # the depth needs every layer index, not just layer 0's shapes
        name = native(key)
        if name is not None and name.startswith("layers.") and name not in shapes:
            shapes[name] = ()
    return {stack: stack_sizes(shapes, stack) for stack in stacks}
