"""The node's parameters file, read for the bag tools.

The replay tools take the same YAML as the node (``--params-file``): ``{node_name: {ros__parameters:
{...}}}`` (optionally nested under namespaces, or ``/**``), or a plain mapping of parameter values.
Values are checked by the node's own validation (`oxygen_ros.ros.params`), so a file the node refuses
is refused here with the same reasons. Private topic names (``~/x``) expand against the node's fully
qualified name, taken from the YAML key (``/oxygen_node``, the node's default name, for ``/**``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from oxygen_ros.ros.params import (
    ConfigError, NodeSettings, default_values, node_settings, runtime_config, settings_from_values,
)  # fmt: skip
from oxygen_ros.runtime import RuntimeConfig

DEFAULT_NODE = "/oxygen_node"  # the node's default name (oxygen_ros.ros.node, launch file)
# Standard ROS parameters a params file may carry for any node; the node's table does not declare them.
_ROS_STANDARD = {"use_sim_time", "qos_overrides", "start_type_description_service"}


class ParamsFileError(ValueError):
    """The parameters file is missing, not YAML, has no parameters, or holds invalid values."""


@dataclass(frozen=True)
class ReplayConfig:
    """The node's settings (topics, rates, outputs), its runtime configuration and its name."""

    settings: NodeSettings
    runtime: RuntimeConfig
    node_fqn: str = DEFAULT_NODE  # e.g. "/oxygen_node" or "/robot1/oxygen_node"
    source: str = ""  # the file it came from ("" = defaults)

    def topic(self, name: str) -> str:
        """Absolute topic name as the node would resolve it: ``~/x`` → ``<node>/x``, ``x`` → ``<ns>/x``."""
        if name.startswith("/"):
            return name
        if name.startswith("~"):
            return self.node_fqn.rstrip("/") + "/" + name[1:].lstrip("/")
        namespace = self.node_fqn.rsplit("/", 1)[0]
        return f"{namespace}/{name}"

    @property
    def camera_topics(self) -> list[str]:
        return [self.topic(t) if t else "" for t in self.settings.camera_topics]

    @property
    def joint_state_topic(self) -> str:
        return self.topic(self.settings.joint_state_topic)

    @property
    def instruction_topic(self) -> str:
        return self.topic(self.settings.instruction_topic)

    @property
    def action_chunk_topic(self) -> str:
        return self.topic("~/action_chunk")

    @property
    def trajectory_topic(self) -> str:
        return self.topic(self.settings.trajectory_topic)

    def text_topic(self, task: str) -> str:
        return self.topic(f"~/text/{task}")

    def final_text_topic(self, task: str) -> str:
        return self.topic(f"~/text/{task}/final")


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


def default_params_file() -> Path | None:
    """The demo configuration shipped with the package (installed share/ or the source checkout), if any."""
    candidates = [Path(__file__).resolve().parents[2] / "config" / "demo.yaml",  # a source checkout first
                  Path(sys.prefix) / "share" / "oxygen_ros" / "config" / "demo.yaml"]  # fmt: skip
    return next((c for c in candidates if c.is_file()), None)


def load_replay_config(
    path: str | Path | None = None, *, node: str | None = None, overrides: Mapping[str, Any] | None = None,
    validate: bool = True,
) -> ReplayConfig:
    """Read and validate a params file (None = the node's defaults), then apply ``overrides``.

    ``validate=False`` only reads the values (for tools that need the topics but not the model, such as
    the demo-bag maker: a robot file with checkpoint paths of another machine is still usable then).

    Raises:
        ParamsFileError: the file is missing or not YAML, or the values are invalid (every problem listed).
    """
    values: dict[str, Any] = {}
    fqn: str | None = None
    source = str(path) if path is not None else "defaults"
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ParamsFileError(f"parameters file {p} does not exist")
        try:
            data = yaml.safe_load(p.read_text())
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ParamsFileError(f"parameters file {p} is not valid YAML: {exc}") from None
        values, fqn = parameters_from_yaml(data, str(p), node)
    if node is not None:  # an explicit name wins (the node may be started under another name)
        fqn = "/" + node.strip("/")
    fqn = fqn or DEFAULT_NODE
    values = {k: v for k, v in values.items() if k not in _ROS_STANDARD}
    values.update(overrides or {})
    try:
        if validate:
            settings, runtime = settings_from_values(values)
        else:
            merged = {**default_values(), **values}
            settings, runtime = node_settings(merged), runtime_config(merged)
    except ConfigError as exc:
        raise ParamsFileError(f"{source}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ParamsFileError(f"{source}: cannot read the parameters: {exc}") from None
    return ReplayConfig(settings, runtime, fqn, source)
