"""Load and save pi0.5 checkpoints in openpi's, LeRobot's or our own layout.

A checkpoint is a directory with ``model.safetensors`` (or ``model.safetensors.index.json`` + shards), a
``config.json`` in the layout's own format and optionally ``assets/<asset_id>/norm_stats.json``. openpi's
``scripts/train_pytorch.py`` writes no config.json (``model.safetensors``, ``optimizer.pt``, ``metadata.pt``,
``assets/``): such a folder loads when its shape is declared (``declared``: openpi config.json fields). Sizes that
a real layout's ``config.json`` cannot express (small test models, OxyGen's causal prompt attention) go in a
sidecar ``oxygen_config.json`` of ``ModelConfig.from_dict`` overrides, which the real tools never read.

Loading is strict: every weight of the model must be present with the right shape and nothing unknown may
be left over; all problems are reported in one :class:`CheckpointError`. The model is built on the meta
device and each tensor is read from the file straight into its final memory (``tensor_stream``), so weights
are read once, never initialized randomly, and never held twice.

Why one file of this size: the load and save paths of the three layouts share one strict key check and one
error report (every problem at once); key maps and config readers live beside it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from oxygen_ros.model.checkpoints.meta_build import no_random_init
from oxygen_ros.model.checkpoints.checkpoint_info import OXYGEN_POLICY_KEYS, CheckpointInfo, CheckpointInfoError, read_checkpoint_info, slot_names
from oxygen_ros.model.network.config import ModelConfig
from oxygen_ros.model.checkpoints.tensor_stream import TensorFileError, TensorReader
from oxygen_ros.model.checkpoints.key_maps import (
    EXPERT_LM_HEAD,
    LAYOUTS,
    NATIVE_LM_HEAD,
    PI0_MARKERS,
    TIED_LM_HEAD,
    VARIANT_FIELDS,
    Layout,
    config_diff,
    config_from_lerobot,
    config_from_openpi,
    layout_of,
    lerobot_config_json,
    merge_config,
    openpi_config_json,
    to_external,
    to_native,
    unknown_variants,
)
from oxygen_ros.model.checkpoints.shapes import sizes_from_tensors
from oxygen_ros.model.network.precision import ISLAND_STYLES, IslandStyle, param_dtype
from oxygen_ros.model.network.vla import Pi05Model

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
SIDECAR_FILE = "oxygen_config.json"
# What openpi's train_pytorch.py writes next to model.safetensors instead of a config.json.
TRAINING_FILES = ("metadata.pt", "optimizer.pt")
# The openpi config.json fields a training checkpoint needs declared, and the runtime parameter of each.
DECLARED_FIELDS = {
    "paligemma_variant": "paligemma_variant", "action_expert_variant": "action_expert_variant",
    "action_dim": "action_dim", "action_horizon": "horizon",
}  # fmt: skip
MAX_LISTED = 8  # keys named per problem kind before "... and N more"
_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
_EMBED = "embed_tokens.weight"


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, or does not match the model; the message says what and where."""


@dataclass
class LoadedCheckpoint:
    model: Pi05Model  # eval mode, gradients off
    config: ModelConfig
    layout: Layout
    source: Path
    norm_stats_path: Path | None  # the chosen assets/<id>/norm_stats.json (None: none, or several and no id)
    norm_stats_paths: dict[str, Path] = field(default_factory=dict)  # every asset id found
    precision: str | None = None  # what config.json declares (openpi "precision", LeRobot "dtype")
    ignored_keys: tuple[str, ...] = ()  # stored tensors pi0.5 never reads (e.g. the expert's lm_head)
    info: CheckpointInfo | None = None  # statistics, chunk length, n_action_steps, prompt format, cameras, ...
    islands: IslandStyle = "none"  # the float32 islands the reduced-precision model keeps
    untied_text_head: bool = False  # lm_head stored apart from the embedding (and loaded as stored)


# ------------------------------------------------------------------------------------------------ config
def _read_json(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: invalid JSON ({exc})") from None


def _checkpoint_dir(checkpoint_dir: str | os.PathLike[str]) -> Path:
    path = Path(checkpoint_dir)
    if not path.exists():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    if not path.is_dir():
        raise CheckpointError(f"checkpoint path {path} is not a directory (expected a folder with {WEIGHTS_FILE})")
    return path


def _read_config_json(directory: Path) -> dict[str, Any]:
    path = directory / CONFIG_FILE
    data = _read_json(path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def detect_layout(checkpoint_dir: str | os.PathLike[str]) -> Layout:
    """Which tool wrote this checkpoint: ``"openpi"``, ``"lerobot"`` or ``"oxygen"`` (from its config.json)."""
    directory = _checkpoint_dir(checkpoint_dir)
    return _layout_of(_read_config_json(directory), directory / CONFIG_FILE)


def _layout_of(data: dict[str, Any], path: Path) -> Layout:
    try:
        return layout_of(data)
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def is_training_checkpoint(directory: Path) -> bool:
    """An openpi ``train_pytorch.py`` folder: weights and training state, no config.json."""
    return not (directory / CONFIG_FILE).exists() and any((directory / f).is_file() for f in TRAINING_FILES)


def _training_config(directory: Path, declared: Mapping[str, Any] | None) -> dict[str, Any]:
    """The openpi config.json a training checkpoint would have, from the declared fields."""
    declared = {k: v for k, v in (declared or {}).items() if v not in (None, "", 0)}
    missing = [f"{DECLARED_FIELDS[k]}" for k in DECLARED_FIELDS if k not in declared]
    if missing:
        raise CheckpointError(
            f"{directory} is an openpi training checkpoint (train_pytorch.py: model.safetensors + metadata.pt, no "
            f"{CONFIG_FILE}); its shape is not stored in a readable file, so set the parameters {missing} "
            "(e.g. paligemma_variant gemma_2b, action_expert_variant gemma_300m, action_dim 32, horizon 50)"
        )
    return {k: declared[k] for k in DECLARED_FIELDS}


def read_config(
    checkpoint_dir: str | os.PathLike[str],
    config_overrides: Mapping[str, Any] | None = None,
    declared: Mapping[str, Any] | None = None,
) -> tuple[ModelConfig, Layout, str | None]:
    """The model config a checkpoint describes: config.json, then the sidecar, then ``config_overrides``.

    Returns (config, layout, declared precision). Overrides use ``ModelConfig.from_dict`` keys. ``declared``
    (openpi config.json fields, see ``DECLARED_FIELDS``) stands in for the config.json of a training checkpoint.
    """
    config, layout, precision, _ = _read_config(_checkpoint_dir(checkpoint_dir), config_overrides, declared)
    return config, layout, precision


def image_slot_names(checkpoint_dir: str | os.PathLike[str], declared: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The checkpoint's name for each image slot (from config.json alone; no weights are read)."""
    directory = _checkpoint_dir(checkpoint_dir)
    config, layout, _, raw = _read_config(directory, None, declared)
    return slot_names(layout, raw, config)


def _read_config(
    directory: Path, config_overrides: Mapping[str, Any] | None, declared: Mapping[str, Any] | None
) -> tuple[ModelConfig, Layout, str | None, dict[str, Any] | None]:
    path = directory / CONFIG_FILE
    raw: dict[str, Any] | None
    if is_training_checkpoint(directory):
        data, raw = _training_config(directory, declared), None
        layout: Layout = "openpi"
    else:
        data = raw = _read_config_json(directory)
        layout = _layout_of(data, path)
    sources = [path.name if raw is not None else "declared parameters"]
    unknown = unknown_variants(data) if layout != "oxygen" else []
    try:
        if layout == "oxygen":  # the model config plus the policy facts it records (read by checkpoint_info)
            merged, precision = {k: v for k, v in data.items() if k not in OXYGEN_POLICY_KEYS}, None
        elif layout == "openpi":
            merged, precision = config_from_openpi(data, unknown_ok=True), data.get("precision")
        else:
            merged, precision = config_from_lerobot(data, unknown_ok=True), data.get("dtype")
    except ValueError as exc:
        raise CheckpointError(f"{path if raw is not None else directory}: {exc}") from None
    if unknown:  # a fine-tune's own variant: its sizes are in its tensors (the sidecar may still refine them)
        merged = merge_config(merged, _sizes_from_weights(directory, layout, unknown))
        sources.append(f"tensor shapes ({' and '.join(VARIANT_FIELDS[u] + ' ' + repr(data.get(VARIANT_FIELDS[u])) for u in unknown)})")
        log.info("%s: unknown variant names; sizes of the %s read from the stored tensors", path, " and ".join(unknown))
    sidecar = directory / SIDECAR_FILE
    if layout != "oxygen" and sidecar.exists():
        extra = _read_json(sidecar)
        if not isinstance(extra, dict):
            raise CheckpointError(f"{sidecar}: expected a JSON object of model config overrides")
        merged = merge_config(merged, extra)
        sources.append(sidecar.name)
    if config_overrides:
        merged = merge_config(merged, config_overrides)
        sources.append("config_overrides")
    try:
        config = ModelConfig.from_dict(merged)
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{directory}: invalid model config (from {' + '.join(sources)}): {exc}") from None
    return config, layout, precision if isinstance(precision, str) else None, raw


def _sizes_from_weights(directory: Path, layout: Layout, stacks: list[str]) -> dict[str, Any]:
    """``{stack: sizes}`` read from the stored tensor shapes (see ``shapes``)."""

    def native(key: str) -> str | None:
        match = to_native(key, layout)
        return match.native if match.kind == "param" else None

    with contextlib.ExitStack() as stack:
        files = _WeightFiles(directory, stack)
        try:
            return sizes_from_tensors(files.keys(), files.shape, native, stacks)
        except ValueError as exc:
            raise CheckpointError(
                f"{files.label}: config.json names a variant the package does not know, and its sizes cannot be read "
                f"from the tensors: {exc}; describe them in {SIDECAR_FILE} (backbone/expert: width, depth, mlp_dim, "
                "num_heads, num_kv_heads, head_dim)"
            ) from None


# ----------------------------------------------------------------------------------------------- weights
class _WeightFiles:
    """The tensors of ``model.safetensors`` or of a sharded checkpoint, opened lazily (memory-mapped)."""

    def __init__(self, directory: Path, stack: contextlib.ExitStack) -> None:
        single, index = directory / WEIGHTS_FILE, directory / INDEX_FILE
        self.where: dict[str, tuple[Any, Path]] = {}
        self._stack = stack
        self._readers: dict[Path, TensorReader] = {}
        if single.exists():
            self.label = single
            handle = self._open(single, stack)
            self.where = {key: (handle, single) for key in handle.keys()}
        elif index.exists():
            self.label = index
            self._open_shards(directory, index, stack)
        else:
            raise CheckpointError(f"{directory}: no {WEIGHTS_FILE} (nor {INDEX_FILE}) in the checkpoint")

    @staticmethod
    def _open(path: Path, stack: contextlib.ExitStack) -> Any:
        try:
            return stack.enter_context(safe_open(str(path), framework="pt", device="cpu"))
        except (SafetensorError, OSError, ValueError) as exc:
            raise CheckpointError(f"{path}: not a readable safetensors file (truncated or corrupt?): {exc}") from None

    def _open_shards(self, directory: Path, index: Path, stack: contextlib.ExitStack) -> None:
        data = _read_json(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(f"{index}: expected a 'weight_map' object of tensor name -> shard file")
        handles: dict[str, Any] = {}
        for shard in sorted(set(weight_map.values())):
            path = directory / shard
            if Path(shard).name != shard or not path.is_file():
                raise CheckpointError(f"{index}: shard {shard!r} is missing from {directory}")
            handles[shard] = self._open(path, stack)
        stored = {shard: set(handle.keys()) for shard, handle in handles.items()}
        absent = [k for k, shard in weight_map.items() if k not in stored[shard]]
        if absent:
            raise CheckpointError(f"{index}: {_listing(absent)} are listed but not in their shard files")
        self.where = {key: (handles[shard], directory / shard) for key, shard in weight_map.items()}

    def keys(self) -> list[str]:
        return list(self.where)

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self.where[key][0].get_slice(key).get_shape())

    def dtype(self, key: str) -> str:
        return self.where[key][0].get_slice(key).get_dtype()

    def _reader(self, path: Path) -> TensorReader:
        if path not in self._readers:
            self._readers[path] = self._stack.enter_context(TensorReader(path))
        return self._readers[path]

    def load(self, key: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """Tensor ``key`` read straight into its own memory in dtype/device: one copy (``tensor_stream``)."""
        path = self.where[key][1]
        try:
            return self._reader(path).read(key, dtype, device)
        except (TensorFileError, OSError, KeyError) as exc:
            raise CheckpointError(f"{path}: cannot read tensor {key!r}: {exc}") from None

    def equals(self, key: str, tensor: torch.Tensor) -> bool:
        path = self.where[key][1]
        try:
            return self._reader(path).equals(key, tensor)
        except (TensorFileError, OSError, KeyError) as exc:
            raise CheckpointError(f"{path}: cannot read tensor {key!r}: {exc}") from None


def _count(items: list[str], noun: str) -> str:
    return f"{len(items)} {noun}" + ("" if len(items) == 1 else "s")


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    more = len(items) - MAX_LISTED
    return shown + (f", ... and {more} more" if more > 0 else "")


@dataclass
class _Plan:
    sources: dict[str, str]  # our name -> stored key
    tied: str | None  # stored key of the tied LM head, if any
    ignored: list[str]


def _plan(files: _WeightFiles, layout: Layout, expected: dict[str, tuple[int, ...]], config: ModelConfig) -> _Plan:
    """Match stored keys to the model's parameters; raise one error listing everything that does not fit."""
    sources: dict[str, str] = {}
    tied: str | None = None
    ignored: list[str] = []
    unexpected: list[str] = []
    duplicates: list[str] = []
    for key in files.keys():
        match = to_native(key, layout)
        if match.kind == "ignored":
            ignored.append(key)
        elif match.kind == "tied_lm_head":
            if tied is not None:
                duplicates.append(f"{key} and {tied}")
            tied = key
        elif match.kind == "param" and match.native in expected:
            if match.native in sources:
                duplicates.append(f"{key} and {sources[match.native]}")
            sources[match.native] = key
        else:
            unexpected.append(key)
    problems = []
    missing = [n for n in expected if n not in sources and not (n == _EMBED and tied)]
    if missing:
        names = [_expected_name(n, layout) for n in missing]
        problems.append(f"{_count(missing, 'missing key')}: {_listing(names)}")
    if unexpected:
        problems.append(f"{_count(unexpected, 'unexpected key')}: {_listing(unexpected)}")
    if duplicates:
        problems.append(f"stored twice under different names: {_listing(duplicates)}")
    wrong = []
    pairs = list(sources.items()) + ([(_EMBED, tied)] if tied else [])
    for native, key in pairs:
        shape, dtype = files.shape(key), files.dtype(key)
        if shape != expected[native]:
            wrong.append(f"{key} is {shape}, the model needs {expected[native]}")
        elif dtype not in _FLOAT_DTYPES:
            wrong.append(f"{key} has dtype {dtype}, not a floating point type")
    if wrong:
        problems.append(f"{_count(wrong, 'tensor')} with the wrong shape or dtype: {_listing(wrong)}")
    if problems:
        hints = _hints(files.keys(), sources, layout)
        b, e = config.backbone, config.expert
        raise CheckpointError(
            f"{files.label} does not match the pi0.5 model ({layout} layout; backbone width {b.width} x "
            f"{b.depth} layers, expert width {e.width}, vocab {config.vocab_size}):\n  "
            + "\n  ".join(problems + hints)
        )
    return _Plan(sources, tied, ignored)


def _expected_name(native: str, layout: Layout) -> str:
    name = to_external(native, layout)
    if native == _EMBED and layout != "oxygen":
        lm_head = ("model." if layout == "lerobot" else "") + TIED_LM_HEAD
        return f"{lm_head} (or {name})"
    return name


def _hints(keys: list[str], matched: dict[str, str], layout: Layout) -> list[str]:
    bare = {k.removeprefix("model.") for k in keys}
    if any(marker in bare for marker in PI0_MARKERS):
        return ["hint: this looks like a pi0 checkpoint (it has state_proj); only pi0.5 is supported"]
    if len(matched) < len(keys) / 2:
        return [f"hint: most stored keys are not {layout} names; is config.json from the same checkpoint?"]
    return []


def _load_tensors(
    files: _WeightFiles, plan: _Plan, dtype: torch.dtype, device: torch.device, islands: IslandStyle = "none"
) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """Each tensor read once, straight from the file into its final memory in its dtype (``dtype``, or float32
    for an island of ``islands``): never a second copy of the weights, even transiently.

    Returns the state and, when the LM head is stored apart from the embedding and differs from it, the LM
    head. LeRobot's PaliGemma keeps the two as separate parameters, so a fine-tune stores two different
    tensors (the embedding trained, the head not); both are kept as stored, as LeRobot loads them.
    """
    state = {native: files.load(key, param_dtype(native, dtype, islands), device) for native, key in plan.sources.items()}
    if plan.tied is None:
        return state, None
    if _EMBED not in state:
        state[_EMBED] = files.load(plan.tied, param_dtype(_EMBED, dtype, islands), device)
        return state, None
    if files.equals(plan.tied, state[_EMBED]):
        return state, None
    return state, files.load(plan.tied, param_dtype(NATIVE_LM_HEAD, dtype, islands), device)


def _check_no_meta_buffers(model: Pi05Model) -> None:
    """The model keeps no non-persistent buffers; fail loudly if one is ever added without a load rule."""
    for name, buf in model.named_buffers():
        if buf.is_meta:
            raise RuntimeError(f"buffer {name} is not stored in checkpoints and has no rule to compute it")


def _resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, str):
        resolved = getattr(torch, dtype, None)
        if not isinstance(resolved, torch.dtype):
            raise CheckpointError(f"unknown dtype {dtype!r}")
        dtype = resolved
    if not dtype.is_floating_point:
        raise CheckpointError(f"dtype must be a floating point type, not {dtype}")
    return dtype


def _find_norm_stats(directory: Path) -> dict[str, Path]:
    assets = directory / "assets"
    if not assets.is_dir():
        return {}
    return {p.parent.relative_to(assets).as_posix(): p for p in sorted(assets.rglob("norm_stats.json"))}




def load_checkpoint(
    checkpoint_dir: str | os.PathLike[str],
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str = "cpu",
    config_overrides: Mapping[str, Any] | None = None,
    asset_id: str | None = None,
    declared: Mapping[str, Any] | None = None,
    float32_islands: str = "auto",
) -> LoadedCheckpoint:
    """Load a pi0.5 checkpoint of any supported layout into a :class:`Pi05Model` (eval mode).

    ``config_overrides`` (``ModelConfig.from_dict`` keys) apply after config.json, e.g. ``{"action_horizon":
    10, "prefix_attention": "causal_text"}``. ``asset_id`` picks ``assets/<asset_id>/norm_stats.json``.
    ``declared``: the shape of a training checkpoint without config.json (see ``DECLARED_FIELDS``).
    ``float32_islands``: which weights stay float32 when ``dtype`` is bf16/fp16: ``auto`` (as the
    checkpoint's framework: openpi, or lerobot for a LeRobot folder), ``openpi``, ``lerobot`` or ``none``.
    """
    directory = _checkpoint_dir(checkpoint_dir)
    dtype, device = _resolve_dtype(dtype), torch.device(device)
    config, layout, precision, raw = _read_config(directory, config_overrides, declared)
    try:
        info = read_checkpoint_info(directory, layout, raw, config)
    except CheckpointInfoError as exc:
        raise CheckpointError(str(exc)) from None
    if float32_islands not in ("auto", *ISLAND_STYLES):
        raise CheckpointError(f"float32_islands must be 'auto' or one of {list(ISLAND_STYLES)}, not {float32_islands!r}")
    islands: IslandStyle = info.islands if float32_islands == "auto" else float32_islands  # type: ignore[assignment]
    with torch.device("meta"), no_random_init():
        model = Pi05Model(config)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    with contextlib.ExitStack() as stack:
        files = _WeightFiles(directory, stack)
        plan = _plan(files, layout, expected, config)
        state, lm_head = _load_tensors(files, plan, dtype, device, islands)
    model.load_state_dict(state, strict=True, assign=True)
    if lm_head is not None:
        model.untie_text_head(lm_head)
        log.info(
            "%s: %s differs from the embedding %s: prompts embed with the stored embedding, text decodes "
            "through the stored lm_head (as LeRobot loads a fine-tune)", files.label, plan.tied, plan.sources[_EMBED]
        )
    _check_no_meta_buffers(model)
    model.eval().requires_grad_(False)
    if plan.ignored:
        log.debug("%s: ignored %d unused tensors: %s", files.label, len(plan.ignored), _listing(plan.ignored))
    stats = _find_norm_stats(directory)
    if asset_id is not None:
        asset_id = asset_id.strip("/")
        if asset_id not in stats:
            found = sorted(stats) or "none"
            raise CheckpointError(f"{directory}: no assets/{asset_id}/norm_stats.json; found: {found}")
        chosen: Path | None = stats[asset_id]
    else:
        chosen = next(iter(stats.values())) if len(stats) == 1 else None
    return LoadedCheckpoint(
        model=model,
        config=config,
        layout=layout,
        source=directory,
        norm_stats_path=chosen,
        norm_stats_paths=stats,
        precision=precision,
        ignored_keys=tuple(plan.ignored),
        info=info,
        islands=islands if dtype != torch.float32 else "none",
        untied_text_head=lm_head is not None,
    )


# ------------------------------------------------------------------------------------------------- saving
def _precision(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(dtype, "float32")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return _jsonable(value.to_dict())
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _write_atomic(path: Path, write: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def _external_state(model: Pi05Model, layout: Layout) -> dict[str, torch.Tensor]:
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    if layout == "oxygen":
        return state
    prefix = "model." if layout == "lerobot" else ""
    out: dict[str, torch.Tensor] = {}
    untied = NATIVE_LM_HEAD in state
    for name, tensor in state.items():
        # Like safetensors.save_model on the real models: the tied embedding is stored as the LM head.
        if name == NATIVE_LM_HEAD or (name == _EMBED and not untied):
            out[prefix + TIED_LM_HEAD] = tensor
        else:
            out[to_external(name, layout)] = tensor
    # The real models have an (unused) expert LM head; openpi and LeRobot load strictly and expect it.
    cfg = model.config
    out[prefix + EXPERT_LM_HEAD] = torch.zeros(cfg.vocab_size, cfg.expert.width, dtype=model.dtype)
    return out


def save_checkpoint(
    model: Pi05Model,
    directory: str | os.PathLike[str],
    layout: Layout = "oxygen",
    norm_stats: Mapping[str, Any] | None = None,
    asset_id: str = "robot",
    delta_action_mask: Sequence[bool] | None = None,
) -> Path:
    """Write ``model`` as a checkpoint in ``layout`` (also how to convert between layouts); returns the dir.

    ``norm_stats`` (openpi's ``{"norm_stats": {...}}`` payload or its inner ``{"state": ..., "actions": ...}``;
    NormStats objects, arrays or lists) goes to ``assets/<asset_id>/norm_stats.json``. ``delta_action_mask``
    (action dims trained relative to the state) is recorded in the "oxygen" layout's config.json.
    """
    if delta_action_mask is not None and layout != "oxygen":
        raise ValueError("only the oxygen layout records a delta_action_mask (openpi keeps it in its training config)")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown checkpoint layout {layout!r}; choose one of {list(LAYOUTS)}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors = _external_state(model, layout)
    _write_atomic(out / WEIGHTS_FILE, lambda p: save_file(tensors, str(p), metadata={"format": "pt"}))
    cfg, precision = model.config, _precision(model.dtype)
    sidecar: dict[str, Any] = {}
    if layout == "oxygen":
        config_json: dict[str, Any] = cfg.to_dict()
        if delta_action_mask is not None:
            config_json["delta_action_mask"] = [bool(m) for m in delta_action_mask]
    else:
        if layout == "openpi":
            maker, reader = openpi_config_json, config_from_openpi
        else:
            maker, reader = lerobot_config_json, config_from_lerobot
        config_json = maker(cfg, precision)
        sidecar = config_diff(cfg.to_dict(), reader(config_json))
    _write_atomic(out / CONFIG_FILE, lambda p: p.write_text(json.dumps(config_json, indent=2)))
    if sidecar:
        _write_atomic(out / SIDECAR_FILE, lambda p: p.write_text(json.dumps(sidecar, indent=2)))
    else:
        (out / SIDECAR_FILE).unlink(missing_ok=True)  # a stale one would override the new config.json
    if norm_stats is not None:
        _save_norm_stats(out, norm_stats, asset_id)
    return out


def _save_norm_stats(out: Path, norm_stats: Mapping[str, Any], asset_id: str) -> None:
    parts = Path(asset_id).parts
    if not asset_id or Path(asset_id).is_absolute() or ".." in parts:
        raise ValueError(f"asset_id must be a relative name without '..', got {asset_id!r}")
    payload = norm_stats if "norm_stats" in norm_stats else {"norm_stats": norm_stats}
    path = out / "assets" / asset_id / "norm_stats.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, lambda p: p.write_text(json.dumps(_jsonable(payload), indent=2, allow_nan=False)))

