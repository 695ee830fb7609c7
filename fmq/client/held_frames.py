"""Request frames a connection holds back to write them together with its next request.

A frame held here is written, in the order it was held, in the same ``sendall`` as the next
request written on its connection (so both reach the server in one segment, are read in
one of its turns and share its group commit), or on its own once its ``linger`` has passed
with no request following, or at once when someone waits for its answer
(:meth:`fmq.client.connection.Connection.hold_encoded`, ``flush_held``). The connection's
locks guard it: held under ``_lock``, taken for a write under the send lock and ``_lock``
both, so that a held frame is never overtaken by a request submitted after it.
"""

from __future__ import annotations

import time


class HeldFrames:
    """The frames held for one connection's next write, with their request ids and when the
    oldest of them is due to be written alone."""

    __slots__ = ("_frames", "due", "request_ids")

    def __init__(self) -> None:
        self._frames: list[bytes] = []
        #: The request ids of the frames held, in order (failed as never sent when the
        #: connection breaks before they were written).
        self.request_ids: list[int] = []
        #: When the held frames are written even if no request follows (monotonic seconds).
        self.due = float("inf")

    def __bool__(self) -> bool:
        return bool(self._frames)

    def add(self, request_id: int, frame: bytes, linger_s: float) -> bool:
        """Hold ``frame``; returns whether it is the first one held (the flusher must then
        learn the new due time)."""
        first = not self._frames
        self._frames.append(frame)
        self.request_ids.append(request_id)
        self.due = min(self.due, time.monotonic() + linger_s)
        return first

    def take(self) -> list[bytes]:
        """Every frame held, in order, which the caller writes now; the holder is empty."""
        frames, self._frames = self._frames, []
        self.request_ids = []
        self.due = float("inf")
        return frames
