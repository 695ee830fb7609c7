"""Progress of a long command on stderr: percent, bytes, rate and ETA on one line that
rewrites itself; silent when stderr is not a terminal (scripts and logs get no noise)."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from fmq.datadir import LOG_DIR, parse_segment_name

#: Redraw at most this often (seconds): a redraw per record would cost more than the work.
REDRAW_INTERVAL = 0.2
#: Look at the clock once per this many updates (updates come once per record).
CLOCK_EVERY = 256


def log_bytes(data_dir: str) -> tuple[int, int]:
    """(first offset, end of the last segment file) of a data directory's log: the range a
    full scan walks (segments are preallocated, so the end may lie past the valid log)."""
    log_dir = os.path.join(data_dir, LOG_DIR)
    bases = sorted(b for b in map(parse_segment_name, os.listdir(log_dir)) if b is not None)
    if not bases:
        return 0, 0
    last = bases[-1]
    return bases[0], last + os.path.getsize(os.path.join(log_dir, f"{last:020d}.seg"))


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - the loop returns


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """``label: 42% 1.2 GiB of 2.9 GiB, 85.3 MiB/s, ETA 20s`` on ``stream``.

    ``update(done)`` takes the amount done (bytes) out of ``total``; ``close()`` ends the
    line. With ``enabled`` None it draws only when ``stream`` is a terminal."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None,
                 enabled: bool | None = None, clock=time.monotonic) -> None:
        self.label = label
        self.total = max(total, 0)
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.clock = clock
        self.started = clock()
        self.done = 0
        self._drawn_at: float | None = None
        self._calls = 0

    def update(self, done: int, total: int | None = None) -> None:
        if total is not None:
            self.total = max(total, 0)
        self.done = max(0, min(done, self.total)) if self.total else max(done, 0)
        if not self.enabled:
            return
        self._calls += 1
        if self._calls % CLOCK_EVERY and self._drawn_at is not None:
            return  # reading the clock for every record of a scan costs more than the scan
        now = self.clock()
        if self._drawn_at is not None and now - self._drawn_at < REDRAW_INTERVAL:
            return
        self._drawn_at = now
        self.stream.write("\r" + self.line(now) + "\x1b[K")
        self.stream.flush()

    def line(self, now: float | None = None) -> str:
        """The progress line as it would be drawn now."""
        now = self.clock() if now is None else now
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        percent = 100.0 * self.done / self.total if self.total else 100.0
        text = f"{self.label}: {percent:3.0f}% {_size(self.done)} of {_size(self.total)}"
        if self.done > 0:
            eta = (self.total - self.done) / rate if rate > 0 else 0.0
            text += f", {_size(rate)}/s, ETA {_duration(eta)}"
        return text

    def close(self) -> None:
        """Draw the final state and end the line (nothing when disabled)."""
        if self.enabled:
            self._drawn_at = None
            self.stream.write("\r" + self.line() + "\x1b[K\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:  # the work is done: the last record may end before the
            self.done = self.total  # preallocated end of its segment
        self.close()
