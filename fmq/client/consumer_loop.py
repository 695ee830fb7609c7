"""What a consumer's application does with messages: fail one (:meth:`ConsumerLoop.nack`),
loop over them with a handler (:meth:`ConsumerLoop.run`) or by iteration, until the consumer
is closed."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from fmq.errors import BrokerClosed, InvalidArgument
from fmq.message import StoredMessage
from fmq.protocol import Op

logger = logging.getLogger("fmq.client")


class ConsumerLoop:
    """Mixed into :class:`~fmq.client.Consumer` (it uses ``poll``, ``commit``, ``call``,
    ``group``, ``broker_groups``, ``_use`` and ``_closed``)."""

    def nack(self, message: StoredMessage, delay: float | None = None) -> int:
        """This group failed ``message``: the server stores it for a redelivery to this group
        after ``delay`` seconds (None: the back-off level of its attempt), or in the group's
        dead-letter topic once it was redelivered ``max_reconsume_times``. Returns its
        redeliveries so far (-1: dead-lettered). Commit as usual afterwards: the message is
        safe once this returns."""
        if delay is not None and (not isinstance(delay, (int, float)) or delay < 0):
            raise InvalidArgument(f"delay must be seconds >= 0 or None, got {delay!r}")
        if self.broker_groups is not None:
            with self._use:
                return self.broker_groups.nack(message, delay)
        resp = self.call(Op.NACK, {"group": self.group, "topic": message.topic,
                                   "queue_id": message.queue_id,
                                   "queue_offset": message.queue_offset,
                                   "delay_ms": -1 if delay is None else round(delay * 1000)})
        return -1 if resp["dead_letter"] else resp["reconsume_times"]

    def run(self, handler: Callable[[StoredMessage], object]) -> None:
        """Call ``handler`` with each message until :meth:`close`; commit after each batch.
        A handler that raises fails that message (:meth:`nack`, logged), and the others go
        on."""
        for batch in self._batches():
            for m in batch:
                try:
                    handler(m)
                except Exception as exc:  # noqa: BLE001 - the application's failure
                    logger.warning("handler failed %s/%d/%d (%s); redelivering later",
                                   m.topic, m.queue_id, m.queue_offset, exc)
                    self.nack(m)
            if batch:
                self.commit()

    def __iter__(self) -> Iterator[StoredMessage]:
        """Messages until :meth:`close` (from another thread, or a signal handler); commit
        as you go."""
        for batch in self._batches():
            yield from batch

    def _batches(self) -> Iterator[list[StoredMessage]]:
        """Polled batches until :meth:`close` (a close from another thread ends it quietly)."""
        while not self._closed:
            try:
                yield self.poll(1.0)
            except BrokerClosed:
                if self._closed:
                    return
                raise
