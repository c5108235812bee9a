"""Model files named by relative paths, found from any working directory.

A parameters file says ``checkpoint: models/demo``. The path is taken as it is when it exists relative to
the working directory; otherwise it is looked up under the package's installed share folder
(``<prefix>/share/oxygen_ros`` for every prefix on AMENT_PREFIX_PATH, then this Python's prefix: where
colcon and pip install the package's data files) and under the source checkout this module runs from.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Mapping, TypeVar

Config = TypeVar("Config")

__all__ = ["PATH_FIELDS", "package_dirs", "resolve_data_path", "where_looked", "with_absolute_paths", "with_resolved_paths"]

PACKAGE = "oxygen_ros"
PATH_FIELDS = ("checkpoint", "tokenizer", "norm_stats")  # RuntimeConfig fields that name files


def package_dirs() -> list[Path]:
    """Folders a package-relative path is looked up in, in order: the source checkout (when this module runs
    from one), then the installed share folders."""
    dirs = []
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "package.xml").is_file():
        dirs.append(checkout)
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    dirs += [Path(p) / "share" / PACKAGE for p in [*prefixes, sys.prefix]]
    return dirs


def resolve_data_path(path: str, *first: Path) -> str:
    """``path`` itself when empty, absolute or existing from the working directory; else the first of
    ``first`` + `package_dirs` that holds it; else ``path`` unchanged (the loader then says it is missing)."""
    if not path or Path(path).expanduser().is_absolute() or Path(path).expanduser().exists():
        return path
    for base in [*first, *package_dirs()]:
        if (base / path).exists():
            return str(base / path)
    return path


def where_looked(path: str) -> str:
    """For a message about a missing relative ``path``: where it was looked for (empty for an absolute one)."""
    if not path or Path(path).expanduser().is_absolute():
        return ""
    return f" (looked in {os.getcwd()} and in the package's folders: {', '.join(str(d) for d in package_dirs())})"


def with_resolved_paths(values: Mapping[str, Any], *first: Path) -> dict[str, Any]:
    """Parameter values with the model file paths (`PATH_FIELDS`) resolved by `resolve_data_path`."""
    return {k: resolve_data_path(v, *first) if k in PATH_FIELDS and isinstance(v, str) else v for k, v in values.items()}


def with_absolute_paths(config: Config) -> Config:
    """A configuration dataclass with its existing model file paths (`PATH_FIELDS`) made absolute: for a process
    whose working directory is not this one's (a Ray task on another node that sees the same paths)."""
    found = {f: str(Path(v).expanduser().resolve()) for f in PATH_FIELDS
             if isinstance(v := getattr(config, f, None), str) and v and Path(v).expanduser().exists()}  # fmt: skip
    return dataclasses.replace(config, **found)  # type: ignore[type-var]
