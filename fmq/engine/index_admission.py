"""Admission of new messages: refuse those the index could not make consumable soon, so
that acknowledged keeps meaning consumable once indexed, not stored in the log for a
restart to find."""

from __future__ import annotations

from fmq.config import BrokerConfig
from fmq.errors import IndexCorrupt, IndexUnavailable
from fmq.index.dispatcher import Dispatcher
from fmq.log.log import Log


class IndexAdmission:
    """Called before any new message or prepare is placed; raises to refuse it."""

    def __init__(self, path: str, config: BrokerConfig, log_: Log,
                 dispatcher: Dispatcher) -> None:
        self.path = path
        self.config = config
        self.log = log_
        self.dispatcher = dispatcher

    def __call__(self) -> None:
        dispatcher = self.dispatcher
        dispatcher.wait_running()  # the indexer process's start, once
        if dispatcher.error is not None:
            raise IndexCorrupt(
                f"the index stopped after an error it cannot retry ({dispatcher.error}); new "
                f"messages are refused because consumers would never see them. Stop the "
                f"broker, run `fmq index rebuild {self.path}` and start it again")
        if dispatcher.failing is not None:
            raise IndexUnavailable(
                f"the index cannot be written ({dispatcher.failing}); new messages are refused "
                f"until it can. FMQ retries by itself: free disk space or fix the disk, then "
                f"send again")
        limit = self.config.index_max_lag_bytes
        lag = self.log.flushed_offset - dispatcher.applied_offset
        if limit and lag > limit:
            raise IndexUnavailable(
                f"the index is {lag} bytes behind the log (index_max_lag_bytes {limit}); new "
                f"messages are refused until it catches up. Send again after a short wait")
