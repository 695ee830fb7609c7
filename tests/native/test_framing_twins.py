"""The compiled frame splitter (``fmq.protocol._framing_c``) against ``fmq.protocol.framing``,
the pure module it is compiled from: the same frames from the same byte stream however it is
cut, the same error (type and message) for a bad length, bad flags, a short header or a
wrong type, the same questions to the receiver's admission (so the same waits for its
budget), and the same bytes left buffered."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.protocol import framing as pure
from tests.native.twins import compiled, outcome

WRONG = [None, 0, "text", ["x"], 1.5, object()]


@pytest.fixture(scope="module")
def fast():
    return compiled("fmq.protocol._framing_c")


def _frames(result: tuple) -> tuple:
    if result[0] == "raised":
        return result
    return ("value", [(f.version, f.opcode, f.flags, f.request_id, bytes(f.payload),
                       f.is_response, f.is_error, repr(f)) for f in result[1]])


@st.composite
def streams(draw) -> bytes:
    """Frames back to back, some with a damaged length or flags, or random bytes."""
    out = bytearray()
    for _ in range(draw(st.integers(0, 5))):
        payload = draw(st.binary(max_size=64))
        length = 12 + len(payload)
        damage = draw(st.sampled_from(["none", "none", "none", "length", "flags", "short"]))
        flags = draw(st.integers(0, 3))
        if damage == "length":
            length = draw(st.integers(0, 2**32 - 1))
        elif damage == "flags":
            flags = draw(st.integers(4, 0xFFFF))
        elif damage == "short":
            length = draw(st.integers(0, 11))
        out += struct.pack(">IBBHQ", length, draw(st.integers(0, 255)),
                           draw(st.integers(0, 255)), flags, draw(st.integers(0, 2**64 - 1)))
        out += payload
    if draw(st.booleans()):
        out += draw(st.binary(max_size=40))
    return bytes(out)


class BudgetAdmission:
    """A receiver with ``left`` bytes of budget (fmq.protocol.framing.Admission): admits a
    frame that fits, offers what is left as room (or no room: every frame asked), refuses a
    frame over ``login_limit`` with an error, and records every question."""

    def __init__(self, left: int, offers_room: bool, login_limit: int | None) -> None:
        self.left = left
        self.offers_room = offers_room
        self.login_limit = login_limit
        self.calls: list[tuple] = []

    def admit(self, n: int) -> bool:
        self.calls.append(("admit", n))
        if self.login_limit is not None and n > self.login_limit:
            raise pure.ProtocolError(f"a frame of {n} bytes before log-in")
        if n > self.left:
            return False
        self.left -= n
        return True

    def room(self) -> int:
        self.calls.append(("room",))
        return self.left if self.offers_room else 0

    def took(self, n: int) -> None:
        self.calls.append(("took", n))
        assert n <= self.left, "frames took more than the room offered"
        self.left -= n


@settings(max_examples=500, deadline=None)
@given(stream=streams(), data=st.data())
def test_decoder_splits_alike(fast, stream: bytes, data) -> None:
    """Any cut of any stream into reads: the same frames, errors and bytes buffered, and the
    same questions to the admission (so the same admission waits)."""
    max_frame = data.draw(st.sampled_from([pure.DEFAULT_MAX_FRAME, 12, 40, 2**32]))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    as_type = data.draw(st.sampled_from([bytes, bytearray, memoryview]))
    budget = data.draw(st.none() | st.integers(0, 400))
    offers_room = data.draw(st.booleans())
    login_limit = data.draw(st.none() | st.integers(12, 80))
    decoders = [pure.FrameDecoder(max_frame), fast.FrameDecoder(max_frame)]
    admissions = [None, None] if budget is None else [
        BudgetAdmission(budget, offers_room, login_limit) for _ in decoders]
    results: list[list] = [[], []]
    for lo, hi in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        for i, decoder in enumerate(decoders):
            got = _frames(outcome(decoder.feed, as_type(stream[lo:hi]), admissions[i]))
            results[i].append((got, decoder.buffered))
        # An admission that refused may have room again (the budget was released).
        for admission in admissions:
            if admission is not None:
                admission.left += 30
    assert results[1] == results[0]
    if budget is not None:
        assert admissions[1].calls == admissions[0].calls
        assert admissions[1].left == admissions[0].left
    assert decoders[1].discard() == decoders[0].discard()


@settings(max_examples=300, deadline=None)
@given(prefix=st.binary(max_size=6), max_frame=st.integers(-1, 2**33), body=st.binary(max_size=30))
def test_length_and_header_alike(fast, prefix: bytes, max_frame: int, body: bytes) -> None:
    assert outcome(fast.frame_length, prefix, max_frame) == outcome(pure.frame_length, prefix, max_frame)
    got = outcome(fast.parse_frame, body)
    want = outcome(pure.parse_frame, body)
    assert _frames((got[0], [got[1]]) if got[0] == "value" else got) == _frames(
        (want[0], [want[1]]) if want[0] == "value" else want)


def test_wrong_types_fail_alike(fast) -> None:
    for value in WRONG:
        assert outcome(fast.FrameDecoder().feed, value) == outcome(pure.FrameDecoder().feed, value)
        assert outcome(fast.parse_frame, value) == outcome(pure.parse_frame, value)
        assert outcome(fast.frame_length, value, 100) == outcome(pure.frame_length, value, 100)
        assert outcome(fast.frame_length, b"\0\0\0\x20", value) == outcome(
            pure.frame_length, b"\0\0\0\x20", value)
    assert issubclass(fast.FrameTooLarge, pure.ProtocolError)


def test_the_compiled_module_is_compiled(fast) -> None:
    assert fast.__file__.endswith((".so", ".pyd")) and type(fast.parse_frame).__name__ == (
        "cython_function_or_method")


@settings(max_examples=60, deadline=None)
@given(extra=st.sampled_from([-1, 0, 1, 5000]), cut=st.integers(0, 40_000),
       seed=st.integers(0, 2**32))
def test_large_payloads_alike(fast, extra: int, cut: int, seed: int) -> None:
    """Payloads around the twin's COPY_LIMIT (bytes of their own up to it, views of the
    read above it) and a frame larger than the C buffer keeps: the same frames."""
    size = fast.COPY_LIMIT + extra
    payload = random.Random(seed).randbytes(size)
    stream = b"".join(struct.pack(">IBBHQ", 12 + len(p), 1, 2, 1, 9) + p
                      for p in (payload, b"tail", payload))
    cut = min(cut, len(stream))
    got = []
    for decoder in (pure.FrameDecoder(), fast.FrameDecoder()):
        frames = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        got.append(_frames(("value", frames)))
        assert decoder.buffered == 0
    assert got[1] == got[0]
    assert type(frames[0].payload) is (bytes if size <= fast.COPY_LIMIT else memoryview)
