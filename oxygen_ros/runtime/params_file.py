"""Reading a ROS 2 node parameters file without ROS (the replay tools and the simulator's evaluation).

The file is the node's own YAML: ``{node_name: {ros__parameters: {...}}}`` (optionally nested under
namespaces, or ``/**``), or a plain mapping of parameter values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from .paths import resolve_data_path, where_looked

__all__ = ["ParamsFileError", "parameters_from_yaml", "read_params_file"]


class ParamsFileError(ValueError):
    """The parameters file is missing, not YAML, has no parameters, or holds invalid values."""


def _find_parameters(data: Mapping[str, Any], path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], dict]]:
    """Every ``ros__parameters`` block with the key path leading to it."""
    found = []
    for key, value in data.items():
        if key == "ros__parameters" and isinstance(value, dict):
            found.append((path, value))
        elif isinstance(value, dict):
            found.extend(_find_parameters(value, path + (str(key),)))
    return found


def _node_fqn(path: tuple[str, ...]) -> str | None:
    """The node name a YAML key path names, or None for wildcards (``/**``) and no key."""
    parts = [p.strip("/") for p in path if p.strip("/")]
    if not parts or any("*" in p for p in parts):
        return None
    return "/" + "/".join(parts)


def parameters_from_yaml(
    data: Any, source: str = "parameters", node: str | None = None
) -> tuple[dict[str, Any], str | None]:
    """(values, node fqn or None if the file does not name the node) from a loaded params document;
    ``node`` picks one node if the file has several."""
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        raise ParamsFileError(f"{source}: expected a mapping at the top, got {type(data).__name__}")
    blocks = _find_parameters(data)
    if not blocks:  # a plain mapping of values
        return dict(data), None
    if node is not None and len(blocks) > 1:
        wanted = "/" + node.strip("/")
        blocks = [b for b in blocks if _node_fqn(b[0]) in (wanted, None) or (b[0] and b[0][-1].strip("/") == node.strip("/"))]
        if not blocks:
            raise ParamsFileError(f"{source}: no ros__parameters for node {node!r}")
    if len(blocks) > 1:
        names = [_node_fqn(p) or "/**" for p, _ in blocks]
        raise ParamsFileError(f"{source}: parameters for several nodes {names}; choose one with --node-name")
    path, values = blocks[0]
    return dict(values), _node_fqn(path)


def read_params_file(path: str | Path, node: str | None = None) -> tuple[dict[str, Any], str | None]:
    """(values, node fqn or None) of a parameters file; raises `ParamsFileError` saying what is wrong.

    A relative path that is not there from the working directory is looked up in the package's folders too
    (`paths.resolve_data_path`: ``config/aloha_demo.yaml`` works from any directory)."""
    p = Path(resolve_data_path(str(path)))
    if not p.is_file():
        raise ParamsFileError(f"parameters file {p} does not exist{where_looked(str(path))}")
    try:
        data = yaml.safe_load(p.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ParamsFileError(f"parameters file {p} is not valid YAML: {exc}") from None
    return parameters_from_yaml(data, str(p), node)
