"""The two implementations of CRC-32C (Castagnoli), the checksum of every record and of the
checkpoint, queue-floors and dedup-window files. :mod:`fmq.log.record` chooses which runs.

The ``crc32c`` package computes it in hardware (tens of GB/s); crcmod's predefined
``crc-32c`` is the portable reference (about 450 MB/s here). Both compute the same function.
"""

from __future__ import annotations

from collections.abc import Callable

import crcmod.predefined

_crcmod_crc32c: Callable[[bytes], int] = crcmod.predefined.mkPredefinedCrcFun("crc-32c")

try:
    from crc32c import crc32c as _hardware
except ImportError:  # pragma: no cover - exercised only where crc32c cannot install
    _hardware = None

#: The hardware implementation, or None where the ``crc32c`` package is not installed.
hardware_crc32c: Callable[[bytes | memoryview], int] | None = _hardware


def reference_crc32c(data: bytes | memoryview) -> int:
    """CRC-32C computed by crcmod (the reference)."""
    return _crcmod_crc32c(bytes(data))
