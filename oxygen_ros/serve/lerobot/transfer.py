"""LeRobot's chunked transfer (``lerobot/transport/utils.py``): a payload as BEGIN, MIDDLE..., END messages.

The client sends 2 MiB chunks (one END chunk when the payload fits); gRPC messages are capped at 4 MiB each
way. The receiver appends chunks and stops at the first END, as lerobot's ``receive_bytes_in_chunks`` does for
an observation; a stream that ends without END, an unknown state, or a payload over ``max_bytes`` is refused
with :class:`TransferError` (the size is checked as chunks arrive, before any is kept past the cap).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CHUNK_BYTES = 2 * 1024 * 1024  # lerobot's CHUNK_SIZE
MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # lerobot's MAX_MESSAGE_SIZE (gRPC send and receive limits)
TRANSFER_BEGIN, TRANSFER_MIDDLE, TRANSFER_END = 1, 2, 3


class TransferError(ValueError):
    """A chunked stream that is not one whole payload within the size cap."""


def receive_chunks(messages: Iterable[Any], max_bytes: int) -> bytes:
    """The payload of a stream of ``Observation`` messages (``transfer_state``, ``data``)."""
    buffer = bytearray()
    started = False
    for message in messages:
        state = message.transfer_state
        if state == TRANSFER_BEGIN:
            buffer.clear()
            started = True
        elif state not in (TRANSFER_MIDDLE, TRANSFER_END):
            raise TransferError(f"unknown transfer state {state}")
        elif not started and state == TRANSFER_MIDDLE:
            raise TransferError("a MIDDLE chunk before any BEGIN chunk")
        if len(buffer) + len(message.data) > max_bytes:
            raise TransferError(f"the payload exceeds {max_bytes} bytes (--max-observation-bytes)")
        buffer += message.data
        if state == TRANSFER_END:
            return bytes(buffer)
    raise TransferError("the stream ended without a TRANSFER_END chunk")


def send_chunks(payload: bytes, message_class: Any) -> list[Any]:
    """``payload`` as lerobot's client chunks it (for this package's own clients and tests)."""
    messages, sent = [], 0
    while sent < len(payload):
        piece = payload[sent : sent + CHUNK_BYTES]
        last = sent + CHUNK_BYTES >= len(payload)
        state = TRANSFER_END if last else TRANSFER_BEGIN if sent == 0 else TRANSFER_MIDDLE
        messages.append(message_class(transfer_state=state, data=piece))
        sent += len(piece)
    return messages
