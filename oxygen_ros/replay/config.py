"""The node's parameters file, read for the bag tools.

The replay tools take the same YAML as the node (``--params-file``): ``{node_name: {ros__parameters:
{...}}}`` (optionally nested under namespaces, or ``/**``), or a plain mapping of parameter values.
Values are checked by the node's own validation (`oxygen_ros.interface.settings`), so a file the node refuses
is refused here with the same reasons. Private topic names (``~/x``) expand against the node's fully
qualified name, taken from the YAML key (``/oxygen_node``, the node's default name, for ``/**``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from oxygen_ros.interface.settings import (
    ConfigError, NodeSettings, default_values, node_settings, runtime_config, settings_from_values,
)  # fmt: skip
from oxygen_ros.runtime import RuntimeConfig
from oxygen_ros.runtime.params_file import ParamsFileError, read_params_file

__all__ = ["ParamsFileError", "ReplayConfig", "default_params_file", "load_replay_config"]

DEFAULT_NODE = "/oxygen_node"  # the node's default name (oxygen_ros.ros.node, launch file)
# Standard ROS parameters a params file may carry for any node; the node's table does not declare them.
_ROS_STANDARD = {"use_sim_time", "qos_overrides", "start_type_description_service"}


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
    def joint_state_topics(self) -> list[str]:
        """Every joint-state topic read (one per arm where joint_state_topics lists several), resolved."""
        return [self.topic(j.topic) for j in self.settings.joint_sources]

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
        values, fqn = read_params_file(path, node)
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
