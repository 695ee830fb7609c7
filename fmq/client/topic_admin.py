"""Topic administration from Python (``Client.create_topic`` and its kin): the requests of
``fmq topic``, answered with the server's JSON as dicts (docs/operations.md, "Topics")."""

from __future__ import annotations

import json
from typing import Any

from fmq.protocol import Op

#: In :meth:`TopicAdmin.alter_topic`: the setting goes back to the broker's.
BROKER_DEFAULT = 0


def _settings(name: str, queues: int | None, retention_ms: int | None,
              retention_bytes: int | None, max_message_size: int | None) -> dict[str, Any]:
    def wire(value: int | None) -> int:
        return -1 if value is None else value  # -1: not given
    return {"settings": {"name": name, "queues": wire(queues),
                         "retention_ms": wire(retention_ms),
                         "retention_bytes": wire(retention_bytes),
                         "max_message_size": wire(max_message_size)}}


class TopicAdmin:
    """Mixed into :class:`fmq.client.Client` (it needs ``call``)."""

    def _json(self, op: Op, fields: dict[str, Any]) -> dict[str, Any]:
        # No retry: a retried create after a lost answer would report TopicExists.
        return json.loads(self.call(op, fields, retries=0)["json"])

    def create_topic(self, name: str, queues: int | None = None,
                     retention_ms: int | None = None, retention_bytes: int | None = None,
                     max_message_size: int | None = None) -> dict[str, Any]:
        """Create topic ``name``; None settings take the broker's. Returns its description
        (as :meth:`describe_topic`). TopicExists when it exists."""
        return self._json(Op.TOPIC_CREATE, _settings(name, queues, retention_ms,
                                                     retention_bytes, max_message_size))["topic"]

    def alter_topic(self, name: str, queues: int | None = None,
                    retention_ms: int | None = None, retention_bytes: int | None = None,
                    max_message_size: int | None = None) -> dict[str, Any]:
        """Change the given settings (None: unchanged; :data:`BROKER_DEFAULT`: back to the
        broker's). Queues only grow (InvalidArgument otherwise)."""
        return self._json(Op.TOPIC_ALTER, _settings(name, queues, retention_ms,
                                                    retention_bytes, max_message_size))["topic"]

    def describe_topic(self, name: str) -> dict[str, Any]:
        """Settings, the settings in force and each queue's range. UnknownTopic if none."""
        return self._json(Op.TOPIC_DESCRIBE, {"topic": name})["topic"]

    def delete_topic(self, name: str, force: bool = False) -> dict[str, Any]:
        """Delete ``name`` (its messages become unreadable). TopicHasLag while consumer
        groups have not read all of it, unless ``force``."""
        return self._json(Op.TOPIC_DELETE, {"topic": name, "force": force})["topic"]

    def list_topics(self) -> list[dict[str, Any]]:
        """Every topic this user may describe, with its settings."""
        return self._json(Op.TOPIC_LIST, {})["topics"]
