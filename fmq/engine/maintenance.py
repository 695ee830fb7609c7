"""The broker's one background thread: the async flush, periodic checkpoints, the
transaction timeout, the leftovers of closed transaction scopes and retention, each on its
own interval."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from fmq.config import BrokerConfig
from fmq.log.log import Log
from fmq.threadname import name_os_thread

logger = logging.getLogger("fmq.broker")  # the broker's lines keep one logger name


#: The longest time between two looks for the leftovers of closed scopes: they are rolled
#: back at most this long after they fall due for a check-back (``tx_check_after_ms``).
CLOSED_SCOPES_INTERVAL_S = 1.0


class Upkeep:
    """What the thread runs: the broker's checkpoint, timeout, closed-scope and retention
    steps."""

    def __init__(self, checkpoint: Callable[[], object], roll_back_timed_out: Callable[[], None],
                 enforce_retention: Callable[[], object],
                 roll_back_closed_scopes: Callable[[], object]) -> None:
        self.checkpoint = checkpoint
        self.roll_back_timed_out = roll_back_timed_out
        self.enforce_retention = enforce_retention
        self.roll_back_closed_scopes = roll_back_closed_scopes


def start_maintenance(config: BrokerConfig, log_: Log, upkeep: Upkeep,
                      stop: threading.Event) -> threading.Thread:
    """Start the maintenance thread; it ends once ``stop`` is set."""
    thread = threading.Thread(target=_maintain, args=(config, log_, upkeep, stop),
                              name="fmq-maintenance", daemon=True)
    thread.start()
    return thread


def _maintain(cfg: BrokerConfig, log_: Log, upkeep: Upkeep, stop: threading.Event) -> None:
    name_os_thread()
    next_cp = time.monotonic() + cfg.checkpoint_interval_ms / 1000.0
    next_ret = time.monotonic() + cfg.retention_interval_ms / 1000.0
    scopes_every = min(CLOSED_SCOPES_INTERVAL_S, cfg.tx_check_after_ms / 1000.0)
    next_scopes = time.monotonic()
    tick = cfg.flush_interval_ms / 1000.0 if cfg.flush_mode == "async" else 0.2
    while not stop.wait(tick):
        try:
            if cfg.flush_mode == "async":
                log_.flush()
            now = time.monotonic()
            if cfg.checkpoint_interval_ms and now >= next_cp:
                upkeep.checkpoint()
                next_cp = now + cfg.checkpoint_interval_ms / 1000.0
            if cfg.tx_timeout_ms and not cfg.follow:  # a follower's primary decides
                upkeep.roll_back_timed_out()
            if not cfg.follow and now >= next_scopes:
                upkeep.roll_back_closed_scopes()
                next_scopes = now + scopes_every
            if cfg.retention_interval_ms and now >= next_ret:
                upkeep.enforce_retention()
                next_ret = now + cfg.retention_interval_ms / 1000.0
        except Exception:  # noqa: BLE001 - reported, the next tick tries again
            logger.exception("background maintenance failed")
