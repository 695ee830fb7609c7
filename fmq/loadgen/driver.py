"""One load process's connections. Each connection is a ``Lane``: an asyncio protocol that
keeps ``window`` operations of its plan in flight and starts the next one from inside
``data_received``, so a request costs one callback and one socket write (no task, no
future, no decode of a SEND answer).

A lane stops starting operations at the deadline and finishes the ones in flight; its
``done`` future is set when it has nothing in flight.

A plan that holds its follow-ups (``Plan.holds_follow_ups``: a transaction's COMMIT written
with the next PREPARE) has them written in one write with the next operation's first
request; the operation still counts as done only when the follow-up's answer arrives.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from fmq.errors import FMQError
from fmq.loadgen.histogram import Histogram
from fmq.loadgen.plans import Plan
from fmq.protocol import FrameDecoder, decode_error


class LaneTotals:
    """What the lanes of one process did, added up."""

    def __init__(self) -> None:
        self.histogram = Histogram()
        self.messages = 0
        self.bytes = 0
        self.operations = 0
        self.errors: Counter[str] = Counter()
        self.first_error: str | None = None
        self.last_answer_ns = 0


class Lane(asyncio.Protocol):
    def __init__(self, plan: Plan, totals: LaneTotals, window: int) -> None:
        self.plan = plan
        self.totals = totals
        self.window = window
        self.deadline_ns = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._decoder = FrameDecoder()
        self._started: dict[int, int] = {}  # request id -> start of its operation (ns)
        self._next_id = 0
        self._transport: asyncio.Transport | None = None
        #: Held follow-ups (written with the next request) and the ids of those in flight,
        #: whose answers end an operation whose place in the window was passed on.
        self._held: list[bytes] = []
        self._carried: set[int] = set()

    # ------------------------------------------------------------------ asyncio protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._started:
            self.totals.errors["ConnectionLost"] += len(self._started)
            self._note_error(f"connection lost: {exc or 'closed by the server'}")
            self._started.clear()
        self._finish()

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        try:
            frames = self._decoder.feed(data)
        except FMQError as exc:
            self._note_error(str(exc))
            self.totals.errors[type(exc).__name__] += 1
            self._transport.close()
            return
        totals = self.totals
        for frame in frames:
            started = self._started.pop(frame.request_id, None)
            if started is None:
                continue
            carried = frame.request_id in self._carried
            if carried:  # its operation's place in the window went to the next one
                self._carried.discard(frame.request_id)
            if frame.is_error:
                exc = decode_error(frame)
                totals.errors[type(exc).__name__] += 1
                self._note_error(str(exc))
                self.plan.failed(frame.request_id)
                if not carried:
                    self._start_operation(now)
                continue
            follow_up, messages, size = self.plan.answer(frame, self._new_id())
            if follow_up is not None:
                self._started[self._next_id] = started
                if self.plan.holds_follow_ups:
                    self._held.append(follow_up)
                    self._carried.add(self._next_id)
                    self._start_operation(now)  # its first request carries the follow-up
                else:
                    self._transport.write(follow_up)
                continue
            totals.histogram.record(now - started, max(1, messages))
            totals.messages += messages
            totals.bytes += size
            totals.operations += 1
            totals.last_answer_ns = now
            if not carried:
                self._start_operation(now)
        if self._held and not self._transport.is_closing():
            self._write(b"")  # nothing followed (the deadline passed): written alone
        if not self._started:
            self._finish()

    # ------------------------------------------------------------------ the loop

    def begin(self, deadline_ns: int) -> None:
        """Start the first ``window`` operations; stop starting new ones at the deadline."""
        self.deadline_ns = deadline_ns
        now = time.perf_counter_ns()
        for _ in range(self.window):
            self._start_operation(now)
        if not self._started:
            self._finish()

    def _start_operation(self, now: int) -> None:
        if now >= self.deadline_ns or self._transport.is_closing():
            return
        request_id = self._new_id()
        frame = self.plan.start(request_id)
        if frame is None:
            return
        self._started[request_id] = time.perf_counter_ns()
        self._write(frame)

    def _write(self, frame: bytes) -> None:
        """Write ``frame`` after the held follow-ups, all in one write."""
        if self._held:
            frame = b"".join([*self._held, frame])
            self._held.clear()
        self._transport.write(frame)

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _note_error(self, text: str) -> None:
        if self.totals.first_error is None:
            self.totals.first_error = text

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    @property
    def in_flight(self) -> int:
        return len(self._started)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
