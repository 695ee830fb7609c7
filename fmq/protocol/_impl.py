"""The one place that chooses how the wire's structs are encoded and decoded.

``fmq.protocol._speedups``, a compiled module with the same names as ``_codecs``, is used
when it is installed; otherwise ``fmq.protocol._codecs``, the pure Python written by
``python -m fmq.protocol.generate``; ``fmq.native.load`` decides (``FMQ_NO_EXTENSIONS=1``
forces the pure one, ``FMQ_REQUIRE_EXTENSIONS=1`` makes a missing compiled one an error). Both must give the bytes
and the errors of the field types one by one (``Struct.reference``); the shared tests in
tests/protocol/test_structs.py run the same cases against each.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import fmq.protocol._codecs as pure
from fmq import native

Codec = tuple[Callable, Callable]


codecs: ModuleType = native.load("fmq.protocol._speedups") or pure
#: "compiled" or "pure": which implementation this process uses.
IMPLEMENTATION = "pure" if codecs is pure else "compiled"


def codec_for(name: str, layout: str, impl: ModuleType | None = None) -> Codec | None:
    """``(encode, decode)`` of the struct ``name`` from the chosen implementation (or
    ``impl``), or None when it has no codec for exactly this ``layout`` (a struct made
    outside the schema, or a schema changed without running the generator)."""
    entry = (impl or codecs).CODECS.get(name)
    if entry is None or entry[0] != layout:
        return None
    return entry[1], entry[2]
