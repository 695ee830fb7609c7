"""A consumer's membership of its group: joining, and the heartbeats that keep it and tell
the server which assignment the consumer reads now, so that a queue it dropped goes to its
next owner only then (docs/cluster.md, "One reader per queue")."""

from __future__ import annotations

import logging

from fmq.errors import FMQError, ProtocolError
from fmq.protocol import Op

from .repeated_failure import RepeatedFailure

logger = logging.getLogger("fmq.client")


class ConsumerMembership:
    """Mixed into :class:`~fmq.client.Consumer` (it uses ``call``, ``group``, ``member_id``,
    ``topics``, ``connection_seq`` and the assignment state the consumer keeps: ``_lock``,
    ``_incoming``,
    ``_assigned``, ``_applied``, ``generation``, ``_stop``, ``_beat_now``, ``_sync``)."""

    def _join(self) -> None:
        resp = self.call(Op.GROUP_JOIN, {"group": self.group, "member_id": self.member_id,
                                         "topics": self.topics})
        self.member_id = resp["member_id"]
        self._heartbeat_interval = resp["heartbeat_interval_ms"] / 1000
        self._take(resp["generation"], resp["assignment"])

    def _take(self, generation: int, assignment: list[dict]) -> None:
        queues = sorted((a["topic"], a["queue_id"]) for a in assignment)
        with self._lock:
            if generation != self.generation or queues != self._assigned:
                self.generation = generation
                self._incoming = (generation, queues, self.connection_seq)

    def _heartbeat_loop(self) -> None:
        failures = RepeatedFailure(logger, f"heartbeat of {self.member_id} in group "
                                           f"{self.group}")
        while True:
            self._beat_now.wait(self._heartbeat_interval)
            self._beat_now.clear()
            if self._stop.is_set():
                return
            try:
                self._take(*self._beat())
                failures.worked()
            except FMQError as exc:
                if not self._stop.is_set():
                    failures.failed(exc)

    def _beat(self) -> tuple[int, list[dict]]:
        """One heartbeat: GROUP_SYNC, which says the generation whose assignment this
        consumer reads now (so the server gives the queues it dropped to their next
        owner), or GROUP_HEARTBEAT to a server without it."""
        fields = {"group": self.group, "member_id": self.member_id, "topics": self.topics}
        if self._sync:
            try:
                resp = self.call(Op.GROUP_SYNC, {**fields, "generation": self._applied},
                                 retries=1)
                return resp["generation"], resp["assignment"]
            except ProtocolError as exc:
                if "unknown opcode" not in str(exc):
                    raise
                self._sync = False
        resp = self.call(Op.GROUP_HEARTBEAT, fields, retries=1)
        return resp["generation"], resp["assignment"]
