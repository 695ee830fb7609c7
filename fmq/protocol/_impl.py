"""The one place that chooses how the wire's structs are encoded and decoded.

``fmq.protocol.struct_codecs`` is the pure Python written by ``python -m
fmq.protocol.generate``; ``_struct_codecs_c`` is the same source compiled by Cython
(setup.py). ``fmq.native.choose`` decides (``FMQ_NO_EXTENSIONS=1`` forces the pure one,
``FMQ_REQUIRE_EXTENSIONS=1`` makes a missing compiled one an error). Both must give the bytes
and the errors of the field types one by one (``Struct.reference``); the shared tests in
tests/protocol/test_structs.py run the same cases against each.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from fmq import native
from fmq.protocol import struct_codecs as struct_codecs_py

Codec = tuple[Callable, Callable]


#: ``struct_codecs_py`` or its compiled twin ``fmq.protocol._struct_codecs_c``.
codecs: ModuleType = native.choose(struct_codecs_py)
#: "compiled" or "pure": which implementation this process uses.
IMPLEMENTATION = "pure" if codecs is struct_codecs_py else "compiled"


def codec_for(name: str, layout: str, impl: ModuleType | None = None) -> Codec | None:
    """``(encode, decode)`` of the struct ``name`` from the chosen implementation (or
    ``impl``), or None when it has no codec for exactly this ``layout`` (a struct made
    outside the schema, or a schema changed without running the generator)."""
    entry = (impl or codecs).CODECS.get(name)
    if entry is None or entry[0] != layout:
        return None
    return entry[1], entry[2]
