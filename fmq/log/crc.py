"""CRC-32C (Castagnoli), the checksum of every record and of the checkpoint file.

The ``crc32c`` package computes it in hardware (tens of GB/s); crcmod's predefined
``crc-32c`` is the portable fallback (about 450 MB/s here) and the reference the tests
cross-check against. Both compute the same function.
"""

from __future__ import annotations

from collections.abc import Callable

import crcmod.predefined

reference_crc32c: Callable[[bytes], int] = crcmod.predefined.mkPredefinedCrcFun("crc-32c")

try:  # the hardware implementation on the hot path
    from crc32c import crc32c as _fast_crc32c
except ImportError:  # pragma: no cover - exercised only where crc32c cannot install
    _fast_crc32c = None

if _fast_crc32c is not None:
    crc32c: Callable[[bytes | memoryview], int] = _fast_crc32c
    IMPLEMENTATION = "crc32c"
else:  # pragma: no cover
    def crc32c(data: bytes | memoryview) -> int:
        return reference_crc32c(bytes(data))

    IMPLEMENTATION = "crcmod"
