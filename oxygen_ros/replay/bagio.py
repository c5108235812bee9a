"""Reading and writing ROS 2 bags (.db3 / .mcap files or rosbag2 folders) with `rosbags`, no rclpy.

- :class:`BagReader` yields time-ordered :class:`BagMessage` s (raw CDR bytes plus topic, type and recorded
  time), with topic remapping. A truncated MCAP recording is salvaged up to the damage (with a warning);
  damage met while iterating ends the iteration with a warning instead of an exception.
- :class:`BagWriter` writes rosbags message objects, raw CDR bytes, or rclpy-style message objects (such as
  those `oxygen_ros.interface.convert` builds) converted field by field. A path ending in ``.mcap`` or ``.db3``
  becomes that single storage file; any other path a rosbag2 folder (storage chosen by ``storage``).
- Message builders for the standard types the tools write (Image, JointState, String, Clock,
  JointTrajectory), as rosbags objects.

Every problem with a bag is a :class:`BagError` whose message names the bag and the cause.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.interfaces import Nodetype, Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.typesys import get_types_from_idl, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from oxygen_ros.interface.msg_types import default_store, oxygen_typestore

from .mcap_salvage import SalvageError, salvage_mcap

IMAGE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
JOINT_STATE = "sensor_msgs/msg/JointState"
STRING = "std_msgs/msg/String"
CLOCK = "rosgraph_msgs/msg/Clock"
JOINT_TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
ACTION_CHUNK = "oxygen_ros_msgs/msg/ActionChunk"
TEXT_DELTA = "oxygen_ros_msgs/msg/TextDelta"
FLOAT64_ARRAY = "std_msgs/msg/Float64MultiArray"
JOINT_GROUP = "interbotix_xs_msgs/msg/JointGroupCommand"
JOINT_SINGLE = "interbotix_xs_msgs/msg/JointSingleCommand"
TWIST_STAMPED = "geometry_msgs/msg/TwistStamped"

STORAGES = ("mcap", "sqlite3")
_SUFFIX_STORAGE = {".mcap": "mcap", ".db3": "sqlite3"}
NS_PER_S = 1_000_000_000


class BagError(Exception):
    """A bag is missing, unreadable or damaged, or cannot be written; the message says which and why."""


# ------------------------------------------------------------------------------------------- remapping
def parse_remap(spec: str) -> tuple[str, str]:
    """``/old:=/new`` → ("/old", "/new"); raises ValueError for anything else."""
    old, sep, new = spec.partition(":=")
    old, new = old.strip(), new.strip()
    if not sep or not old.startswith("/") or not new.startswith("/") or ":=" in new:
        raise ValueError(f"bad remap {spec!r}: expected /old_topic:=/new_topic")
    return old, new


def parse_remaps(specs: Sequence[str]) -> dict[str, str]:
    """Several ``/old:=/new`` rules; the same old topic given twice is an error."""
    remap: dict[str, str] = {}
    for spec in specs:
        old, new = parse_remap(spec)
        if old in remap and remap[old] != new:
            raise ValueError(f"topic {old} is remapped twice ({remap[old]} and {new})")
        remap[old] = new
    return remap


# ---------------------------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class BagMessage:
    """One recorded message: topic (after remapping), type name, recorded time and CDR bytes."""

    topic: str
    msgtype: str
    timestamp_ns: int
    rawdata: bytes


@dataclass(frozen=True)
class TopicSummary:
    topic: str  # after remapping
    msgtype: str
    count: int
    qos: tuple[Qos, ...] = ()  # offered QoS profiles recorded with the topic (may be empty)


class BagReader:
    """Time-ordered messages of one ROS 2 bag; use as a context manager.

    ``remap`` renames topics ({old: new}); ``typestore`` is used for bags that carry no message
    definitions and for salvaged MCAP files (default: ROS 2 standard types plus oxygen_ros_msgs).
    ``warnings`` collects what went wrong in a readable-but-damaged bag.
    """

    def __init__(self, path: str | Path, *, remap: Mapping[str, str] | None = None, typestore: Typestore | None = None) -> None:
        self.path = Path(path)
        self.remap = dict(remap or {})
        self.warnings: list[str] = []
        self.truncated = False
        self._default_typestore = typestore
        self._reader: Any = None
        self._salvaged: list[BagMessage] | None = None
        self.typestore: Typestore | None = None
        self.topics: dict[str, TopicSummary] = {}
        self.start_ns = 0
        self.end_ns = 0
        self.message_count = 0

    # -- opening
    def __enter__(self) -> "BagReader":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Open the bag; raises BagError (missing, not a bag, damaged beyond salvage)."""
        if not self.path.exists():
            raise BagError(f"bag {self.path} does not exist")
        if self.path.is_file() and self.path.suffix not in _SUFFIX_STORAGE:
            raise BagError(f"bag {self.path}: unknown file type {self.path.suffix!r} (expected .mcap, .db3 or a rosbag2 folder)")
        if self._default_typestore is None:
            self._default_typestore = _default_typestore()
        from rosbags.highlevel import AnyReader

        try:
            reader = AnyReader([self.path], default_typestore=self._default_typestore)
            reader.open()
        except Exception as exc:  # rosbags raises many types for bad files; all mean "cannot read this bag"
            mcap = self._mcap_file()
            if mcap is None:
                raise BagError(f"cannot read bag {self.path}: {_reason(exc)}") from None
            self._open_salvaged(mcap, exc)
            return
        self._reader = reader
        self.typestore = reader.typestore
        self.message_count = reader.message_count
        self.start_ns = reader.start_time if reader.message_count else 0
        self.end_ns = reader.end_time - 1 if reader.message_count else 0
        topics: dict[str, TopicSummary] = {}
        for conn in reader.connections:
            name = self.remap.get(conn.topic, conn.topic)
            qos = tuple(getattr(conn.ext, "offered_qos_profiles", ()) or ())
            old = topics.get(name)
            count = conn.msgcount + (old.count if old else 0)
            topics[name] = TopicSummary(name, conn.msgtype, count, qos or (old.qos if old else ()))
        self.topics = topics

    def _mcap_file(self) -> Path | None:
        if self.path.is_file():
            return self.path if self.path.suffix == ".mcap" else None
        files = sorted(self.path.glob("*.mcap"))
        return files[0] if len(files) == 1 else None

    def _open_salvaged(self, mcap: Path, exc: Exception) -> None:
        try:
            found = salvage_mcap(mcap)
        except (SalvageError, OSError) as err:
            raise BagError(f"cannot read bag {self.path}: {_reason(exc)} ({err})") from None
        typestore = self._default_typestore
        assert typestore is not None
        for schema in found.schemas.values():
            if schema.name in typestore.fielddefs or not schema.data:
                continue
            try:
                if schema.encoding == "ros2idl":
                    typestore.register(get_types_from_idl(schema.data))
                else:
                    typestore.register(get_types_from_msg(schema.data, schema.name))
            except Exception as err:  # noqa: BLE001 - an unusable definition only makes that topic unreadable
                self.warnings.append(f"bag {self.path}: cannot parse the definition of {schema.name}: {_reason(err)}")
        messages: list[BagMessage] = []
        counts: dict[str, list] = {}
        for cid, stamp, data in found.messages:
            channel = found.channels.get(cid)
            if channel is None:
                continue
            schema = found.schemas.get(channel.schema_id)
            msgtype = schema.name if schema else ""
            topic = self.remap.get(channel.topic, channel.topic)
            messages.append(BagMessage(topic, msgtype, stamp, data))
            counts.setdefault(topic, [msgtype, 0])[1] += 1
        for channel in found.channels.values():  # topics with no surviving message still exist
            schema = found.schemas.get(channel.schema_id)
            counts.setdefault(self.remap.get(channel.topic, channel.topic), [schema.name if schema else "", 0])
        if not messages and not found.channels:
            raise BagError(f"cannot read bag {self.path}: {_reason(exc)}; nothing could be salvaged ({found.stop_reason})")
        self.truncated = True
        self.warnings.append(
            f"bag {self.path} is damaged ({_reason(exc)}); read {len(messages)} messages before the damage"
            f" ({found.stop_reason})"
        )
        self.typestore = typestore
        self._salvaged = messages
        self.topics = {t: TopicSummary(t, mt, n) for t, (mt, n) in counts.items()}
        self.message_count = len(messages)
        self.start_ns = messages[0].timestamp_ns if messages else 0
        self.end_ns = messages[-1].timestamp_ns if messages else 0

    def close(self) -> None:
        if self._reader is not None:
            try:
                self._reader.close()
            except Exception:  # noqa: BLE001 - closing a damaged bag may fail again; nothing left to do
                pass
            self._reader = None
        self._salvaged = None

    # -- reading
    def messages(self, topics: Sequence[str] | None = None) -> Iterator[BagMessage]:
        """Messages in recorded-time order (remapped names), optionally only ``topics``.

        Damage found while reading stops the iteration and adds a warning (the messages before it were
        already yielded), so callers can use the partial result.
        """
        wanted = set(topics) if topics is not None else None
        if self._salvaged is not None:
            yield from (m for m in self._salvaged if wanted is None or m.topic in wanted)
            return
        if self._reader is None:
            raise BagError(f"bag {self.path} is not open")
        conns = [c for c in self._reader.connections if wanted is None or self.remap.get(c.topic, c.topic) in wanted]
        if wanted is not None and not conns:
            return
        count, last = 0, None
        iterator = self._reader.messages(connections=conns)
        while True:
            try:
                conn, stamp, raw = next(iterator)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - damaged data: keep what was read
                self.truncated = True
                where = f"after {count} messages" + (f" (last at {last / NS_PER_S:.3f} s)" if last is not None else "")
                self.warnings.append(f"bag {self.path} is damaged: reading stopped {where}: {_reason(exc)}")
                return
            count, last = count + 1, stamp
            yield BagMessage(self.remap.get(conn.topic, conn.topic), conn.msgtype, stamp, bytes(raw))

    def deserialize(self, msg: BagMessage) -> Any:
        """The rosbags message object of ``msg``; raises BagError naming topic and time if it cannot be decoded."""
        assert self.typestore is not None, "open the bag first"
        try:
            return self.typestore.deserialize_cdr(msg.rawdata, msg.msgtype)
        except Exception as exc:  # noqa: BLE001 - any decode failure means this message is unusable
            raise BagError(
                f"bag {self.path}: cannot decode a {msg.msgtype or 'message of unknown type'} on {msg.topic}"
                f" at {msg.timestamp_ns / NS_PER_S:.3f} s: {_reason(exc)}"
            ) from None


def _default_typestore() -> Typestore:
    """Standard types plus oxygen_ros_msgs; only the standard ones if our .msg files cannot be found
    (bags carry their own definitions, so that only matters for bags without them)."""
    try:
        return oxygen_typestore()
    except FileNotFoundError:
        return get_typestore(default_store())


def _reason(exc: BaseException) -> str:
    if isinstance(exc, MemoryError):  # rosbags trusted a garbage length field
        return "a record claims an impossible size (damaged or not a bag)"
    text = " ".join(str(a) for a in exc.args) if exc.args else ""
    return text or type(exc).__name__


def bag_info(path: str | Path) -> dict[str, Any]:
    """Topics (type, count), time range and warnings of a bag, as plain data."""
    with BagReader(path) as reader:
        return {
            "path": str(path),
            "start_ns": reader.start_ns,
            "end_ns": reader.end_ns,
            "message_count": reader.message_count,
            "topics": {t.topic: {"type": t.msgtype, "count": t.count} for t in reader.topics.values()},
            "warnings": list(reader.warnings),
        }


# ---------------------------------------------------------------------------------------------- writing
def resolve_storage(path: str | Path, storage: str | None = None) -> tuple[str, bool]:
    """(storage plugin name, single file?) for an output path: ``x.mcap`` / ``x.db3`` are single files of
    that storage (``storage`` must agree); anything else is a rosbag2 folder (``storage`` or "mcap")."""
    suffix = Path(path).suffix
    if storage is not None and storage not in STORAGES:
        raise BagError(f"unknown storage {storage!r} (choose from {', '.join(STORAGES)})")
    if suffix in _SUFFIX_STORAGE:
        implied = _SUFFIX_STORAGE[suffix]
        if storage is not None and storage != implied:
            raise BagError(f"output {path} has suffix {suffix} but storage {storage!r} was asked for")
        return implied, True
    return storage or "mcap", False


def remove_bag(path: Path) -> None:
    """Delete an existing bag (a storage file, or a folder holding metadata.yaml); refuse anything else."""
    if path.is_file() and path.suffix in _SUFFIX_STORAGE:
        path.unlink()
    elif path.is_dir() and (path / "metadata.yaml").is_file():
        shutil.rmtree(path)
    elif path.exists():
        raise BagError(f"{path} exists and does not look like a bag; not overwriting it")


class BagWriter:
    """Writes a ROS 2 bag; use as a context manager (an exception aborts and removes the partial bag)."""

    def __init__(
        self, path: str | Path, *, storage: str | None = None, typestore: Typestore | None = None, overwrite: bool = False
    ) -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer

        self.path = Path(path)
        self.storage, self.single_file = resolve_storage(self.path, storage)
        if self.path.exists():
            if not overwrite:
                raise BagError(f"output bag {self.path} already exists (use --overwrite to replace it)")
            remove_bag(self.path)
        if not self.path.parent.exists():
            raise BagError(f"cannot write bag {self.path}: folder {self.path.parent} does not exist")
        self.typestore = typestore if typestore is not None else oxygen_typestore()
        self._folder = self.path.with_name(f".{self.path.stem}.partial") if self.single_file else self.path
        if self.single_file and self._folder.exists():
            shutil.rmtree(self._folder)  # left over from an interrupted run of ours
        plugin = StoragePlugin.MCAP if self.storage == "mcap" else StoragePlugin.SQLITE3
        try:
            self._writer = Writer(self._folder, version=9, storage_plugin=plugin)
            self._writer.open()
        except Exception as exc:  # noqa: BLE001 - WriterError, OSError: report which bag and why
            raise BagError(f"cannot write bag {self.path}: {_reason(exc)}") from None
        self._connections: dict[tuple[str, str], Any] = {}
        self.counts: dict[str, int] = {}
        self._closed = False

    def __enter__(self) -> "BagWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def write(self, topic: str, msgtype: str, timestamp_ns: int, msg: Any, *, qos: Sequence[Qos] = ()) -> None:
        """Append one message at ``timestamp_ns`` (recorded time). ``msg``: CDR bytes, a rosbags object of
        ``msgtype`` or any object with the same fields (e.g. an rclpy message)."""
        key = (topic, msgtype)
        conn = self._connections.get(key)
        if conn is None:
            conn = self._writer.add_connection(topic, msgtype, typestore=self.typestore, offered_qos_profiles=list(qos))
            self._connections[key] = conn
        if isinstance(msg, (bytes, bytearray, memoryview)):
            data = bytes(msg)
        else:
            if not isinstance(msg, self.typestore.types[msgtype]):
                msg = to_rosbags(msg, msgtype, self.typestore)
            data = bytes(self.typestore.serialize_cdr(msg, msgtype))
        self._writer.write(conn, int(timestamp_ns), data)
        self.counts[topic] = self.counts.get(topic, 0) + 1

    def close(self) -> None:
        """Finish the bag (index, metadata) and, for a single-file output, move the file into place."""
        if self._closed:
            return
        self._closed = True
        try:
            self._writer.close()
            if self.single_file:
                ext = ".mcap" if self.storage == "mcap" else ".db3"
                (self._folder / f"{self._folder.name}{ext}").replace(self.path)
                shutil.rmtree(self._folder)
        except Exception as exc:  # noqa: BLE001
            raise BagError(f"cannot finish bag {self.path}: {_reason(exc)}") from None

    def abort(self) -> None:
        """Stop writing and remove what was written."""
        if self._closed:
            return
        self._closed = True
        try:
            self._writer.abort()
        except Exception:  # noqa: BLE001 - best effort: the folder is removed below anyway
            pass
        shutil.rmtree(self._folder, ignore_errors=True)


# ------------------------------------------------------------------------------- object <-> rosbags
_NUMPY_TYPES = {
    "bool": np.bool_, "byte": np.uint8, "char": np.uint8, "int8": np.int8, "uint8": np.uint8,
    "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32,
    "int64": np.int64, "uint64": np.uint64, "float32": np.float32, "float64": np.float64,
}  # fmt: skip


def to_rosbags(obj: Any, msgtype: str, typestore: Typestore) -> Any:
    """Copy any object with the fields of ``msgtype`` (e.g. an rclpy message) into a rosbags object."""
    cls = typestore.types[msgtype]
    _, fields = typestore.fielddefs[msgtype]
    values = {name: _convert(getattr(obj, name), node, detail, typestore) for name, (node, detail) in fields}
    return cls(**values)


def _convert(value: Any, node: int, detail: Any, typestore: Typestore) -> Any:
    if node == Nodetype.BASE:
        base = detail[0]
        if base in ("string", "wstring"):
            return str(value)
        if base == "bool":
            return bool(value)
        return float(value) if base.startswith("float") else int(value)
    if node == Nodetype.NAME:
        return to_rosbags(value, detail, typestore)
    (sub_node, sub_detail), _length = detail  # ARRAY or SEQUENCE
    if sub_node == Nodetype.BASE and sub_detail[0] not in ("string", "wstring"):
        try:
            return np.frombuffer(value, dtype=_NUMPY_TYPES[sub_detail[0]]).copy()
        except (TypeError, ValueError):
            return np.asarray(value, dtype=_NUMPY_TYPES[sub_detail[0]])
    return [_convert(v, sub_node, sub_detail, typestore) for v in value]


# ---------------------------------------------------------------------------------------------- builders
def time_msg(typestore: Typestore, ns: int) -> Any:
    sec, nanosec = divmod(int(ns), NS_PER_S)
    return typestore.types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec)


def duration_msg(typestore: Typestore, ns: int) -> Any:
    sec, nanosec = divmod(int(ns), NS_PER_S)
    return typestore.types["builtin_interfaces/msg/Duration"](sec=sec, nanosec=nanosec)


def header_msg(typestore: Typestore, stamp_ns: int, frame_id: str = "") -> Any:
    return typestore.types["std_msgs/msg/Header"](stamp=time_msg(typestore, stamp_ns), frame_id=frame_id)


def image_msg(typestore: Typestore, rgb: np.ndarray, stamp_ns: int, frame_id: str = "", encoding: str = "rgb8") -> Any:
    """sensor_msgs/Image from an HxWx3 uint8 RGB array (encoding rgb8 or bgr8)."""
    if encoding not in ("rgb8", "bgr8"):
        raise ValueError(f"image_msg writes rgb8 or bgr8, not {encoding!r}")
    pixels = np.ascontiguousarray(rgb if encoding == "rgb8" else rgb[:, :, ::-1], dtype=np.uint8)
    height, width = pixels.shape[:2]
    return typestore.types[IMAGE](
        header=header_msg(typestore, stamp_ns, frame_id), height=height, width=width, encoding=encoding,
        is_bigendian=0, step=width * 3, data=pixels.reshape(-1),
    )  # fmt: skip


def joint_state_msg(
    typestore: Typestore, names: Sequence[str], position: np.ndarray, velocity: np.ndarray, stamp_ns: int
) -> Any:
    """sensor_msgs/JointState; effort is filled with zeros (never an empty float64 array, see DESIGN §4)."""
    pos = np.asarray(position, dtype=np.float64)
    return typestore.types[JOINT_STATE](
        header=header_msg(typestore, stamp_ns), name=list(names), position=pos,
        velocity=np.asarray(velocity, dtype=np.float64), effort=np.zeros_like(pos),
    )  # fmt: skip


def string_msg(typestore: Typestore, text: str) -> Any:
    return typestore.types[STRING](data=text)


def clock_msg(typestore: Typestore, ns: int) -> Any:
    return typestore.types[CLOCK](clock=time_msg(typestore, ns))


def joint_trajectory_msg(
    typestore: Typestore, joint_names: Sequence[str], positions: np.ndarray, step_period_ns: int, stamp_ns: int = 0
) -> Any:
    """trajectory_msgs/JointTrajectory with point k at (k+1)·step_period (the first point one period ahead,
    as joint trajectory controllers need); ``stamp_ns`` 0 means "start on receipt"."""
    point_cls = typestore.types["trajectory_msgs/msg/JointTrajectoryPoint"]
    empty = np.zeros(0, dtype=np.float64)
    points = [
        point_cls(positions=np.asarray(row, dtype=np.float64), velocities=empty, accelerations=empty, effort=empty,
                  time_from_start=duration_msg(typestore, (k + 1) * step_period_ns))
        for k, row in enumerate(np.asarray(positions))
    ]  # fmt: skip
    return typestore.types[JOINT_TRAJECTORY](header=header_msg(typestore, stamp_ns), joint_names=list(joint_names), points=points)


def qos_profile(reliable: bool = True, transient_local: bool = False, depth: int = 10) -> Qos:
    """A recorded-QoS entry for the bag metadata (what a player uses to recreate the publisher)."""
    zero = QosTime(0, 0)
    return Qos(
        QosHistory.KEEP_LAST, depth, QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
        QosDurability.TRANSIENT_LOCAL if transient_local else QosDurability.VOLATILE,
        zero, zero, QosLiveliness.AUTOMATIC, zero, False,
    )  # fmt: skip
