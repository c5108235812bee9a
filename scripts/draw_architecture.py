"""Draw docs/architecture.md's diagrams from the code itself, so they cannot go stale.

    .venv/bin/python scripts/draw_architecture.py            # rewrite the diagrams in docs/architecture.md
    .venv/bin/python scripts/draw_architecture.py --check    # exit 1 (and say which) when they differ from the code

* **layers**: one Mermaid flowchart per ``layers`` contract of ``.importlinter`` (the top-level one, then the
  model's): the contract's layers top to bottom, each package a box (marked where it imports rclpy), and an
  arrow for every package that imports another, read from the source with ``ast``. An arrow that points up a
  layer (what ``lint-imports`` refuses) is drawn dotted and labelled ``UP``.
* **tick**: a Mermaid sequence diagram of the calls that cross from one package of ``oxygen_ros`` into another
  while ``PolicyRuntime`` serves one control tick (``make_frame``, ``step``) and the decode steps after it, on
  the tiny random-weight model (eager paths, one thread), recorded with ``sys.setprofile``; each call once, in
  the order first made, with how often it was made. No rclpy: ``oxygen_node``'s model thread makes the same
  three calls (``ros/`` is the layer above ``runtime/``).

Each diagram sits in docs/architecture.md between ``<!-- diagram:NAME -->`` and ``<!-- /diagram:NAME -->``;
test/test_architecture_diagrams.py fails when the committed ones differ from what this script draws now.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import inspect
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "oxygen_ros"
DOC = ROOT / "docs" / "architecture.md"
CONTRACTS = ROOT / ".importlinter"


# ------------------------------------------------------------------------------------------------ layers
@dataclass(frozen=True)
class LayersContract:
    name: str
    container: str  # e.g. "oxygen_ros" or "oxygen_ros.model"
    layers: tuple[tuple[str, ...], ...]  # top to bottom; siblings of one layer together


def layers_contracts(path: Path = CONTRACTS) -> list[LayersContract]:
    """Every ``type = layers`` contract of an import-linter INI file, in file order."""
    if not path.exists():
        raise FileNotFoundError(f"{path} holds no import-linter contracts; the layers diagram is drawn from them")
    ini = configparser.ConfigParser()
    ini.read(path, encoding="utf-8")
    out = []
    for section in ini.sections():
        if not section.startswith("importlinter:contract:") or ini[section].get("type") != "layers":
            continue
        rows = [line.strip() for line in ini[section]["layers"].splitlines() if line.strip()]
        layers = tuple(tuple(p.strip() for p in re.split(r"[|:]", row)) for row in rows)
        for container in ini[section]["containers"].split():
            out.append(LayersContract(ini[section].get("name", section), container, layers))
    return out


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """The modules a file imports, relative imports resolved (``from a import b`` counts a.b too: b may be a module)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def import_graph(container: str, root: Path = ROOT) -> tuple[dict[str, Counter], set[str]]:
    """(child -> Counter of the children it imports, children that import rclpy) for the children of a package."""
    folder = root.joinpath(*container.split("."))
    depth = container.count(".") + 1
    edges: dict[str, Counter] = {}
    rclpy: set[str] = set()
    for path in sorted(folder.rglob("*.py")):
        module = _module_name(path, root)
        parts = module.split(".")
        if len(parts) <= depth:
            continue  # the container's own __init__
        child = parts[depth]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for target in _imported(tree, module, path.name == "__init__.py"):
            t = target.split(".")
            if t[0] == "rclpy":
                rclpy.add(child)
            elif t[:depth] == container.split(".") and len(t) > depth and t[depth] != child:
                if folder.joinpath(t[depth]).is_dir() or folder.joinpath(t[depth] + ".py").exists():
                    edges.setdefault(child, Counter())[t[depth]] += 1
    return edges, rclpy


def _node_id(name: str) -> str:
    return re.sub(r"\W", "_", name)


def render_layers(contract: LayersContract, root: Path = ROOT) -> str:
    """A Mermaid flowchart: the contract's layers top to bottom and every import between its packages."""
    edges, rclpy = import_graph(contract.container, root)
    level = {pkg: i for i, row in enumerate(contract.layers) for pkg in row}
    folder = root.joinpath(*contract.container.split("."))
    present = sorted(p.name for p in folder.iterdir() if (p / "__init__.py").exists()) + sorted(
        p.stem for p in folder.glob("*.py") if p.name != "__init__.py")
    outside = [p for p in present if p not in level]
    lines = ["flowchart TB"]
    for i, row in enumerate(contract.layers):
        lines.append(f'  subgraph L{i}["layer {i + 1}"]')
        lines.append("    direction LR")
        for pkg in row:
            label = f"{pkg}/<br/>rclpy" if pkg in rclpy else f"{pkg}/"
            lines.append(f'    {_node_id(pkg)}["{label}"]')
        lines.append("  end")
    if outside:
        lines.append('  subgraph OUT["outside the contract"]')
        lines.extend(f'    {_node_id(p)}["{p}"]' for p in outside)
        lines.append("  end")
    for src in sorted(edges):
        for dst in sorted(edges[src]):
            upward = src in level and dst in level and level[dst] < level[src]
            sibling = src in level and dst in level and level[dst] == level[src]
            arrow = f"-. UP .->" if upward else ("-. sibling .->" if sibling else "-->")
            lines.append(f"  {_node_id(src)} {arrow} {_node_id(dst)}")
    return "\n".join(lines)


def layers_summary(contract: LayersContract, root: Path = ROOT) -> str:
    """One line under the diagram: what was read, and how many imports point up or across a layer."""
    edges, _ = import_graph(contract.container, root)
    level = {pkg: i for i, row in enumerate(contract.layers) for pkg in row}
    pairs = [(s, d) for s in edges for d in edges[s]]
    up = sum(1 for s, d in pairs if s in level and d in level and level[d] < level[s])
    across = sum(1 for s, d in pairs if s in level and d in level and level[d] == level[s])
    return (f"`{contract.container}`: {len(level)} packages in {len(contract.layers)} layers, "
            f"{len(pairs)} package-to-package imports, {up} pointing up a layer, {across} between siblings.")


# -------------------------------------------------------------------------------------------------- tick
@dataclass(frozen=True)
class Call:
    caller: str  # package of the nearest oxygen_ros frame up the stack
    callee: str  # package of the called function
    function: str  # its qualified name, module-relative


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == PACKAGE else None


def _is_plumbing(frame: object) -> bool:
    """Generated code (a dataclass's __init__) and property getters: attribute reads, not steps of the flow."""
    code = frame.f_code  # type: ignore[attr-defined]
    if code.co_filename.startswith("<"):
        return True
    owner = frame.f_locals.get("self") if code.co_argcount and code.co_varnames[0] == "self" else None  # type: ignore[attr-defined]
    return owner is not None and isinstance(inspect.getattr_static(type(owner), code.co_name, None), property)


def _record_calls(run: object) -> list[tuple[Call, int]]:
    """Run ``run()`` under sys.setprofile; the cross-package calls in first-call order, with their counts
    (the diagram shows each call once)."""
    seen: dict[Call, int] = {}

    def profile(frame, event, _arg):  # noqa: ANN001, ANN202 - sys.setprofile's signature
        if event != "call":
            return
        callee = _package_of(frame.f_globals.get("__name__", ""))
        if callee is None:
            return
        back = frame.f_back
        while back is not None and _package_of(back.f_globals.get("__name__", "")) is None:
            back = back.f_back
        caller = _package_of(back.f_globals.get("__name__", "")) if back is not None else None
        if caller is None or caller == callee or _is_plumbing(frame):
            return
        module = frame.f_globals["__name__"].split(".", 2)[-1]
        call = Call(caller, callee, f"{module}.{frame.f_code.co_qualname}")
        seen[call] = seen.get(call, 0) + 1

    sys.setprofile(profile)
    try:
        run()  # type: ignore[operator]
    finally:
        sys.setprofile(None)
    return list(seen.items())


def trace_one_tick(decode_steps: int = 3) -> tuple[list[tuple[Call, int]], list[tuple[Call, int]]]:
    """The cross-package calls of one control tick (make_frame + step) and of the decode steps after it."""
    import numpy as np
    import torch

    from oxygen_ros.runtime import PolicyRuntime, RuntimeConfig

    torch.manual_seed(0)
    config = RuntimeConfig(model_preset="tiny", device="cpu", dtype="float32", num_threads=1,
                           tokens_per_frame=decode_steps, action_backend="eager", prefill_backend="eager")  # fmt: skip
    runtime = PolicyRuntime.load(config)
    runtime.engine.ignore_eos = True  # text lengths fixed: the same calls whatever tokens this CPU's rounding picks
    size = runtime.image_size
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
    state = np.zeros(runtime.state_dim or 7)

    def tick(seq: int) -> None:
        frame = runtime.make_frame([image], state, "pick up the red cup", stamp_ns=seq * 200_000_000, frame_seq=seq)
        runtime.step(frame)

    tick(0)  # the first tick pays one-time work; the traced one is the second
    runtime.decode()
    calls_tick = _record_calls(lambda: tick(1))
    calls_decode = _record_calls(runtime.decode)
    runtime.close()
    return calls_tick, calls_decode


def render_tick(calls_tick: list[tuple[Call, int]], calls_decode: list[tuple[Call, int]], layers: list[str] | None = None) -> str:
    """A Mermaid sequence diagram of one tick's cross-package calls, participants in the layers' order (top
    first), else in the order they first appear."""
    order: list[str] = []
    for call, _ in calls_tick + calls_decode:
        for pkg in (call.caller, call.callee):
            if pkg not in order:
                order.append(pkg)
    if layers:
        order.sort(key=lambda p: layers.index(p) if p in layers else len(layers))
    lines = ["sequenceDiagram"]
    lines.extend(f"  participant {p} as {p}/" for p in order)

    def messages(calls: list[tuple[Call, int]]) -> None:
        for call, _ in calls:
            lines.append(f"  {call.caller}->>{call.callee}: {call.function}")

    lines.append(f"  Note over {order[0]},{order[-1]}: control tick: make_frame, then step (prefill, chunk, fork text)")
    messages(calls_tick)
    lines.append(f"  Note over {order[0]},{order[-1]}: between ticks: decode (k batched decode steps)")
    messages(calls_decode)
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- the doc
def diagrams(root: Path = ROOT) -> dict[str, str]:
    """Every diagram of the doc, by name, as the Markdown between its markers."""
    out = {}
    contracts = layers_contracts(root / ".importlinter")
    for contract in contracts:
        name = "layers" if contract.container == PACKAGE else "layers-" + contract.container.split(".", 1)[1]
        out[name] = f"```mermaid\n{render_layers(contract, root)}\n```\n\n{layers_summary(contract, root)}"
    top = [pkg for c in contracts if c.container == PACKAGE for row in c.layers for pkg in row]
    out["tick"] = f"```mermaid\n{render_tick(*trace_one_tick(), layers=top)}\n```"
    return out


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- diagram:{re.escape(name)} -->\n)(.*?)\n?(<!-- /diagram:{re.escape(name)} -->)", re.DOTALL)


def committed(text: str, name: str) -> str | None:
    m = _block(name).search(text)
    return m.group(2) if m else None


def write(text: str, drawn: dict[str, str]) -> str:
    for name, body in drawn.items():
        if committed(text, name) is None:
            raise ValueError(f"docs/architecture.md has no <!-- diagram:{name} --> ... <!-- /diagram:{name} --> block")
        text = _block(name).sub(lambda m: m.group(1) + body + "\n" + m.group(3), text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 when a diagram differs")
    args = ap.parse_args(argv)
    drawn = diagrams()
    text = DOC.read_text(encoding="utf-8")
    if args.check:
        stale = [name for name, body in drawn.items() if committed(text, name) != body]
        for name in stale:
            print(f"docs/architecture.md: diagram '{name}' differs from the code", file=sys.stderr)
        return 1 if stale else 0
    DOC.write_text(write(text, drawn), encoding="utf-8")
    print(f"wrote {len(drawn)} diagrams into {DOC.relative_to(ROOT)}: {', '.join(drawn)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
