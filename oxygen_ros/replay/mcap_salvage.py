"""Recover the readable part of a truncated or damaged MCAP file.

A recording cut short (robot powered off, disk full) has no footer, so indexed readers refuse it. MCAP is
a sequence of self-delimiting records, so everything before the damage can still be read: this module
walks the records from the start and keeps schemas, channels and messages until a record is incomplete or
invalid. A chunk that is cut or fails its checksum is dropped whole.

Format reference: https://mcap.dev/spec (records are opcode u8, length u64, body; integers little-endian;
strings and byte arrays are u32-length prefixed; chunk records are u64-length prefixed).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"\x89MCAP0\r\n"

_OP_HEADER = 0x01
_OP_FOOTER = 0x02
_OP_SCHEMA = 0x03
_OP_CHANNEL = 0x04
_OP_MESSAGE = 0x05
_OP_CHUNK = 0x06
_OP_DATA_END = 0x0F


class SalvageError(ValueError):
    """The file is not an MCAP file at all (bad magic or header)."""


@dataclass
class SalvagedSchema:
    name: str
    encoding: str
    data: str


@dataclass
class SalvagedChannel:
    topic: str
    schema_id: int
    message_encoding: str


@dataclass
class SalvageResult:
    """What could be read; ``stop_reason`` says why reading ended ("" = the file ended cleanly)."""

    schemas: dict[int, SalvagedSchema] = field(default_factory=dict)
    channels: dict[int, SalvagedChannel] = field(default_factory=dict)
    messages: list[tuple[int, int, bytes]] = field(default_factory=list)  # (channel id, log time ns, data)
    stop_reason: str = ""
    bytes_read: int = 0


class _Cursor:
    """Little-endian reads from a bytes buffer; raises struct.error / IndexError past the end."""

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = memoryview(buf)
        self.pos = pos

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise struct.error(f"record needs {n} bytes at offset {self.pos}, only {len(self.buf) - self.pos} left")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u16(self) -> int:
        return struct.unpack("<H", self.take(2))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def string(self) -> str:
        return bytes(self.take(self.u32())).decode("utf-8")


def _decompress(data: bytes, compression: str, size: int) -> bytes:
    if compression == "":
        return data
    if compression == "zstd":
        try:
            from compression import zstd  # Python >= 3.14
        except ImportError:
            from backports import zstd  # type: ignore[no-redef]  # what rosbags uses before 3.14
        return zstd.decompress(data)
    if compression == "lz4":
        import lz4.frame

        return lz4.frame.decompress(data)
    raise ValueError(f"unsupported chunk compression {compression!r}")


def _records(result: SalvageResult, buf: memoryview, top_level: bool) -> None:
    """Parse records of ``buf`` into ``result``; stops at the first incomplete or invalid one."""
    cur = _Cursor(buf)
    while cur.pos < len(buf):
        start = cur.pos
        try:
            op = cur.take(1)[0]
            body = _Cursor(cur.take(cur.u64()))
            if op == _OP_SCHEMA:
                sid = body.u16()
                name, encoding = body.string(), body.string()
                data = bytes(body.take(body.u32())).decode("utf-8", errors="replace")
                result.schemas[sid] = SalvagedSchema(name, encoding, data)
            elif op == _OP_CHANNEL:
                cid, sid = body.u16(), body.u16()
                topic, encoding = body.string(), body.string()
                result.channels[cid] = SalvagedChannel(topic, sid, encoding)
            elif op == _OP_MESSAGE:
                cid = body.u16()
                body.u32()  # sequence
                log_time = body.u64()
                body.u64()  # publish time
                result.messages.append((cid, log_time, bytes(body.take(len(body.buf) - body.pos))))
            elif op == _OP_CHUNK and top_level:
                body.u64(), body.u64()  # message start / end time
                size, crc = body.u64(), body.u32()
                compression = body.string()
                raw = _decompress(bytes(body.take(body.u64())), compression, size)
                if len(raw) != size or (crc and zlib.crc32(raw) != crc):
                    result.stop_reason = f"chunk at byte {start} fails its size or checksum check"
                    return
                _records(result, memoryview(raw), top_level=False)
            elif op in (_OP_FOOTER, _OP_DATA_END) and top_level:
                return
        except (struct.error, UnicodeDecodeError, ValueError, OSError) as exc:
            if top_level:
                result.stop_reason = f"incomplete or invalid record at byte {start}: {exc}"
                result.bytes_read = start
            else:
                raise ValueError(f"chunk content is invalid: {exc}") from None
            return
        if top_level:
            result.bytes_read = cur.pos
    if top_level:
        result.stop_reason = "the file ends without a footer (truncated recording)"


def salvage_mcap(path: str | Path) -> SalvageResult:
    """Read every complete record of an MCAP file, in file order (messages sorted by log time).

    Raises:
        SalvageError: the file does not start like an MCAP file.
        OSError: the file cannot be read.
    """
    data = Path(path).read_bytes()
    if not data.startswith(MAGIC):
        raise SalvageError(f"{path} is not an MCAP file (bad magic bytes)")
    result = SalvageResult()
    _records(result, memoryview(data)[len(MAGIC) :], top_level=True)
    result.bytes_read += len(MAGIC)
    result.messages.sort(key=lambda m: m[1])  # stable: file order within equal times
    return result
