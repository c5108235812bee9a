"""Where the ahead-of-time compiled functions (``compiled_aot``) live on disk: one file per function and key,
written atomically, checked on reading, and compiled by one process at a time.

* **Key.** A file's name holds a SHA-256 of everything the compiled code depends on: the torch and Python
  versions, the CPU's vector capability, torch's thread count, the compile options, the model's configuration
  and dtype, the function's name, and the source of every module of ``oxygen_ros.model`` (the code Dynamo
  traced). Any change of them names another file: a stale artefact is never looked at. The weights' values
  are not in the key: they are the compiled graph's inputs, so another checkpoint of the same configuration
  uses the same artefact.
* **Shared and kept.** The files sit in ``<inductor cache>/oxygen_ros_aot`` (``TORCHINDUCTOR_CACHE_DIR``, by
  default ``~/.cache/oxygen_ros/inductor``), next to inductor's compiled kernels that they load. A write goes to
  a temporary file renamed into place, so a reader sees the old file or the new one, never half of one.
  Compiling and saving hold an exclusive ``flock`` on ``<file>.lock``: processes starting together wait for
  the first one and load what it wrote instead of each compiling the same graphs.
* **Checked.** A file is a magic line, the SHA-256 of its payload and the payload (a pickled list of
  serialized variants). A file that fails the check or does not unpickle is logged and treated as absent; the
  next save replaces it.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import pickle
import platform
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import torch

log = logging.getLogger(__name__)

MAGIC = b"oxygen_ros aot artefact 1\n"
DIGEST_BYTES = 32


@cache
def model_source_digest() -> str:
    """SHA-256 of the source of every module of ``oxygen_ros.model`` (what the compiled functions trace)."""
    h = hashlib.sha256()
    model_dir = Path(__file__).resolve().parents[1]
    for path in sorted(model_dir.rglob("*.py")):
        h.update(path.relative_to(model_dir).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def artefact_key(**parts: object) -> str:
    """The key of a compiled function: ``parts`` (its name, options, model configuration ...) plus the
    versions, machine and source it was compiled with."""
    environment = {
        "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
        "source": model_source_digest(),
    }
    text = repr(sorted((environment | parts).items()))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def store_dir() -> Path:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir()) / "oxygen_ros_aot"


class ArtefactFile:
    """The serialized variants of one compiled function under one key."""

    def __init__(self, name: str, key: str, folder: Path | None = None) -> None:
        slug = "".join(c if c.isalnum() else "_" for c in name)
        self.path = (folder or store_dir()) / f"{slug}-{key}.bin"

    def read(self) -> list[bytes]:
        """The stored variants; [] when there is no file or it is unreadable (logged)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("compiled artefact %s unreadable (%s); compiling again", self.path, exc)
            return []
        payload = data[len(MAGIC) + DIGEST_BYTES:]
        if not data.startswith(MAGIC) or hashlib.sha256(payload).digest() != data[len(MAGIC): len(MAGIC) + DIGEST_BYTES]:
            log.warning("compiled artefact %s is corrupt (checksum mismatch); compiling again", self.path)
            return []
        try:
            variants = pickle.loads(payload)
        except Exception as exc:  # noqa: BLE001 - a payload that passed the checksum but does not unpickle
            log.warning("compiled artefact %s is unreadable (%s); compiling again", self.path, exc)
            return []
        return [v for v in variants if isinstance(v, bytes)] if isinstance(variants, list) else []

    def write(self, variants: list[bytes]) -> None:
        """Replace the file atomically (a temporary file in the same folder, renamed into place)."""
        payload = pickle.dumps(variants)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @contextmanager
    def locked(self, on_wait: object = None) -> Iterator[None]:
        """Hold the file's exclusive lock (other processes compiling the same function wait here);
        ``on_wait()`` is called once when another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a+b") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if callable(on_wait):
                    on_wait()
                fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
