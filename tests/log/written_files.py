"""The file a write-and-sync call leaves: shared by the twin tests of the calls that write a
flush (``fmq.log.write_sync`` and ``fmq.log.flusher``)."""

from __future__ import annotations

import os
from collections.abc import Callable


def file_after(write: Callable[[int, object, int], object], path: str, prefill: bytes,
               data, position: int) -> bytes:
    """The bytes of ``path`` after it was filled with ``prefill`` and ``write(fd, data,
    position)`` ran on it."""
    with open(path, "wb") as f:
        f.write(prefill)
    fd = os.open(path, os.O_RDWR)
    try:
        write(fd, data, position)
    finally:
        os.close(fd)
    with open(path, "rb") as f:
        return f.read()
