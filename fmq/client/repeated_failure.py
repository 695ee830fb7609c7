"""One log line per cause of a failure that repeats (a heartbeat every second while a
group fails over), and one when it works again: a fail-over reads as what happened, not as
a screenful of the same line."""

from __future__ import annotations

import logging


class RepeatedFailure:
    """The failures of one recurring action (``what``, e.g. "heartbeat of M in group G"):
    :meth:`failed` logs a warning when the cause differs from the last one logged;
    :meth:`worked` logs, once, that it works again and how many tries failed."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self.logger = logger
        self.what = what
        self.failures = 0
        self._last_cause: str | None = None

    def failed(self, exc: BaseException) -> None:
        self.failures += 1
        cause = str(exc)
        if cause != self._last_cause:
            self._last_cause = cause
            self.logger.warning("%s failed: %s (retrying; the same failure again is not "
                                "logged)", self.what, cause)

    def worked(self) -> None:
        if self.failures:
            self.logger.info("%s works again after %d failed tries", self.what, self.failures)
            self.failures = 0
            self._last_cause = None
