"""A read's frames admitted together (``RequestAdmission.room`` and ``took``) against the
same frames admitted one by one (``RequestAdmission.admit`` for each, as the frame decoder
asked before): the same frames received, the same bytes taken from the request budget and
held, the same peak, the same pauses and waits, the same refusals before log-in, from
budgets already partly used by other connections, some of them waiting for the total.

Real budgets and real decoders (the pure one and its compiled twin); no server."""

from __future__ import annotations

import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fmq.protocol import framing
from fmq.server.net.budgets import SharedBudget
from fmq.server.net.request_admission import LOGIN_FRAME_LIMIT, SMALL_FRAME, RequestAdmission
from tests.native.twins import compiled, outcome


def decoders() -> list:
    found = [framing.FrameDecoder]
    try:
        found.append(compiled("fmq.protocol._framing_c").FrameDecoder)
    except pytest.skip.Exception:
        pass
    return found


class OneByOne:
    """The same admission asked frame by frame: it offers no room."""

    def __init__(self, admission: RequestAdmission) -> None:
        self.admission = admission

    def admit(self, n: int) -> bool:
        return self.admission.admit(n)

    def room(self) -> int:
        return 0

    def took(self, n: int) -> None:  # pragma: no cover - never asked with no room
        raise AssertionError(f"took({n}) without room")


class Connection:
    """One connection's admission in a shared budget, with its pauses recorded."""

    def __init__(self, budget: SharedBudget, logged_in: bool) -> None:
        self.events: list[str] = []
        self.admission = RequestAdmission(
            budget.share(), accepting=lambda: True, pause=lambda: self.events.append("pause"),
            resume=lambda: self.events.append("resume"), logged_in=lambda: logged_in)


def frame(size: int) -> bytes:
    """A frame whose length field is ``size``."""
    return struct.pack(">IBBHQ", size, 1, 1, 0, 7) + bytes(size - 12)


@st.composite
def scenarios(draw) -> dict:
    """Budgets a few frames fill (most frames small; some over SMALL_FRAME, which wait for
    room and are refused before log-in), already used by other connections."""
    sizes = draw(st.lists(st.integers(12, 300) | st.integers(SMALL_FRAME - 100,
                                                             2 * SMALL_FRAME),
                          min_size=1, max_size=10))
    stream = b"".join(frame(n) for n in sizes)
    total = draw(st.integers(1, 2000) | st.integers(2000, 4 * SMALL_FRAME))
    others_hold = draw(st.integers(0, total))
    # Another connection waiting: for more than is left (it blocks the total: nobody may
    # take before it), or for what may fit (granted at once then).
    others_wait = draw(st.none() | st.integers(total - others_hold + 1, total + 1)
                       | st.integers(1, total + 1))
    return {
        "total": total,
        "per_connection": draw(st.integers(1, 2000) | st.integers(1, 4 * SMALL_FRAME)),
        "others_hold": others_hold,
        "others_wait": others_wait,
        "own_hold": draw(st.just(0) | st.integers(0, 2000)),
        "logged_in": draw(st.sampled_from([True, True, True, False])),
        "stream": stream,
        "cuts": sorted(draw(st.lists(st.integers(0, len(stream)), max_size=3))),
    }


def run(decoder_class, scenario: dict, together: bool) -> tuple:
    """Feed the scenario's reads to a decoder with the connection's admission; between
    reads, the other connections release what they hold (a wait may be granted)."""
    budget = SharedBudget("requests", scenario["total"], scenario["per_connection"])
    others = budget.share()
    budget.take(others, scenario["others_hold"])
    if scenario["others_wait"] is not None:
        budget.wait(budget.share(), scenario["others_wait"], scenario["others_wait"],
                    lambda n: None)
    connection = Connection(budget, scenario["logged_in"])
    admission = connection.admission
    budget.take(admission.share, scenario["own_hold"])
    decoder = decoder_class(framing.DEFAULT_MAX_FRAME)
    asked = admission if together else OneByOne(admission)
    stream, cuts = scenario["stream"], scenario["cuts"]
    reads = []
    for lo, hi in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got = outcome(decoder.feed, stream[lo:hi], asked)
        if got[0] == "value":
            got = ("value", [f.request_id for f in got[1]], [len(f.payload) for f in got[1]])
        # Each frame received goes to its request, which holds its bytes (start_frames).
        for size in got[2] if got[0] == "value" else []:
            admission.received(12 + size)
        reads.append((got, decoder.buffered, admission.waiting))
        if got[0] == "raised":
            break
        budget.release(others, others.used // 2 + 1)
    return (reads, budget.used, budget.peak, admission.share.used, admission.receiving,
            budget.waiting, connection.events)


def scenario(**fields) -> dict:
    """A scenario of one read of ``frames`` with nothing else held or waiting, but for
    ``fields``."""
    sizes = fields.pop("frames")
    stream = b"".join(frame(n) for n in sizes)
    return {"total": 64 * SMALL_FRAME, "per_connection": 64 * SMALL_FRAME, "others_hold": 0,
            "others_wait": None, "own_hold": 0, "logged_in": True, "stream": stream,
            "cuts": [], **fields}


@pytest.mark.parametrize("decoder_class", decoders(), ids=lambda c: c.__module__)
@settings(max_examples=600, deadline=None)
@given(scenario=scenarios())
# The edges, each also found by the strategy, but not in every run: another connection
# waits for the total (the first frame passes by the small-frame rule, the next must wait);
# a frame over LOGIN_FRAME_LIMIT after a small one before log-in; the connection's own limit.
@example(scenario=scenario(frames=[100, 100, 100], total=1000, others_hold=500,
                           others_wait=600))
@example(scenario=scenario(frames=[100, LOGIN_FRAME_LIMIT + 1], logged_in=False))
@example(scenario=scenario(frames=[100, 100, 100], per_connection=250))
def test_a_reads_frames_admitted_together_as_one_by_one(decoder_class, scenario) -> None:
    assert run(decoder_class, scenario, together=True) == run(decoder_class, scenario,
                                                              together=False)


def test_a_pipelined_read_asks_the_budget_twice_not_per_frame() -> None:
    """64 small frames in one read: the first admitted by ``admit``, the other 63 counted
    against one ``room`` and taken in one ``took``."""
    budget = SharedBudget("requests", 64 * 1024 * 1024, 32 * 1024 * 1024)
    admission = Connection(budget, logged_in=True).admission
    calls: list[str] = []

    class Counted:
        def admit(self, n: int) -> bool:
            calls.append("admit")
            return admission.admit(n)

        def room(self) -> int:
            calls.append("room")
            return admission.room()

        def took(self, n: int) -> None:
            calls.append("took")
            admission.took(n)

    for decoder_class in decoders():
        calls.clear()
        frames = decoder_class().feed(frame(1036) * 64, Counted())
        assert len(frames) == 64 and calls == ["admit", "room", "took"]


def test_no_room_before_log_in_so_a_large_frame_is_refused() -> None:
    budget = SharedBudget("requests", 64 * 1024 * 1024, 32 * 1024 * 1024)
    admission = Connection(budget, logged_in=False).admission
    for decoder_class in decoders():
        got = outcome(decoder_class().feed, frame(100) + frame(LOGIN_FRAME_LIMIT + 1),
                      admission)
        assert got[0] == "raised" and got[1] == "AuthenticationRequired"
