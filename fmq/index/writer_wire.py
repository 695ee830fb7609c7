"""What the broker and its indexer process (:mod:`fmq.index.indexer_process`) tell each
other over two pipes.

Broker to indexer: fixed 9-byte commands, at most one per flush, never one per message: the
log is flushed up to an offset (``F``) or someone waits for the index (``H``, skip the
linger). The pipe's end means the broker is gone: exit at once (a closing broker kills the
indexer and indexes the rest itself; a dead one's next open does). A write of 9 bytes to a
pipe is atomic, so a non-blocking writer never sends half a command.

Indexer to broker: one JSON line per index transaction or state change: the offset applied
up to with the queues it made consumable and whether it added timers, the transient error it
is retrying (``failing``), that writes work again (``recovered``), or the error that stopped
it for good (``error``).
"""

from __future__ import annotations

import json
import struct

_COMMAND = struct.Struct(">cQ")
COMMAND_SIZE = _COMMAND.size
FLUSHED = b"F"
HURRY = b"H"


def command(kind: bytes, offset: int = 0) -> bytes:
    return _COMMAND.pack(kind, offset)


def parse_commands(data: bytes) -> list[tuple[bytes, int]]:
    """The whole commands in ``data`` (a caller keeps the rest for the next read)."""
    whole = len(data) - len(data) % COMMAND_SIZE
    return [_COMMAND.unpack_from(data, pos) for pos in range(0, whole, COMMAND_SIZE)]


def applied_report(applied: int, queues: set[tuple[str, int]], timers_added: bool) -> bytes:
    return _line({"applied": applied, "queues": sorted(queues), "timers": timers_added})


def failing_report(text: str, retries: int) -> bytes:
    return _line({"failing": text, "retries": retries})


def recovered_report() -> bytes:
    return _line({"recovered": True})


def error_report(text: str) -> bytes:
    return _line({"error": text})


def _line(report: dict) -> bytes:
    return json.dumps(report, separators=(",", ":")).encode() + b"\n"


def parse_report(line: bytes) -> dict:
    return json.loads(line)
