"""A TCP proxy on 127.0.0.1 between a follower and its primary that flips one bit, once,
in the middle of the first large answer frame (a REPL_FETCH chunk's record bytes)."""

from __future__ import annotations

from tests.frame_proxy import FrameProxy

LARGE = 4096  # an answer frame this long carries log records


class BitFlipProxy(FrameProxy):
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.flipped = 0
        super().__init__(upstream)

    def answer(self, frame: bytes) -> bytes | None:
        length = len(frame) - 4
        if self.flipped or length < LARGE:
            return frame
        damaged = bytearray(frame)
        damaged[4 + length // 2] ^= 0x10
        self.flipped += 1
        return bytes(damaged)
