"""Item limits checked on a request's raw payload, before it is decoded.

Decoding runs on the event loop, and its cost grows with the number of items in a list
(each becomes a dict, then a Message, then passes its checks): an 8 MiB SEND_BATCH of
half a million empty messages took seconds and hundreds of MiB. A list's u32 count comes
before its items on the wire, so an oversized list is refused from the count alone, for
the price of decoding the few short fields in front of it. Requests under the limits
decode in well under a tenth of a second (docs/design.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from fmq.errors import InvalidArgument, ProtocolError
from fmq.protocol import SCHEMA, Frame, Op
from fmq.protocol.types import U32


@dataclass(frozen=True)
class ListLimit:
    field: str  # the list field of the request
    limit: int
    setting: str  # the configuration field that sets it
    advice: str  # what the client should do instead


def list_count(opcode: int, payload: bytes | memoryview, field: str) -> int | None:
    """The item count of list ``field`` in a request payload, decoding only the fields in
    front of it. None when the payload is too short or malformed: the full decode then
    reports the problem as usual."""
    buf = memoryview(payload)
    pos = 0
    try:
        for name, ftype in SCHEMA[opcode].request:
            if name == field:
                return U32.decode(buf, pos)[0]
            pos = ftype.decode(buf, pos)[1]
    except ProtocolError:
        return None
    raise KeyError(f"{Op(opcode).name} has no field {field!r}")


class RequestLimits:
    """The per-opcode list limits of one server."""

    def __init__(self, limits: dict[Op, ListLimit]) -> None:
        self.limits = limits

    def check(self, frame: Frame) -> None:
        """Raise InvalidArgument when a list of the request is longer than allowed."""
        lim = self.limits.get(frame.opcode)
        if lim is None or len(frame.payload) <= lim.limit:
            # Every list item takes at least one byte, so a payload this short cannot hold
            # more than the limit: a count claiming more is refused by the decode itself
            # (ProtocolError) before any item is built. Most requests end here, unparsed.
            return
        n = list_count(frame.opcode, frame.payload, lim.field)
        if n is not None and n > lim.limit:
            raise InvalidArgument(
                f"{Op(frame.opcode).name} carries {n} {lim.field}, the limit ({lim.setting}) "
                f"is {lim.limit}; {lim.advice}")
