"""What makes a producer idempotent on the client side: a producer id of its own and a
sequence number per message, sent as the message properties the broker's dedup window
reads (docs/format.md, "Idempotent producers"). A resend of the same message carries the
same number, so the broker answers it with the original's result instead of storing it
twice; that is what lets the producers retry a send that timed out or lost its connection.
"""

from __future__ import annotations

import itertools
import secrets

from fmq.message import PRODUCER_ID_PROPERTY, Message, check_dedup_properties
from fmq.protocol.batch import encode_message, idempotence_properties


def new_producer_id() -> str:
    """A random producer id: 16 hex digits."""
    return secrets.token_hex(8)


class Sequencer:
    """A producer's id and its next sequence number (thread-safe: ``next`` on an
    ``itertools.count`` runs under the interpreter lock)."""

    def __init__(self, enabled: bool, producer_id: str | None) -> None:
        self.enabled = enabled
        self.producer_id = producer_id or new_producer_id()
        if producer_id is not None:  # the same rules as the broker's, refused here at once
            check_dedup_properties(idempotence_properties(None, producer_id, 0))
        self._next = itertools.count()

    def for_properties(self, properties: dict[str, str] | None) -> tuple[str, int] | None:
        """(producer id, sequence) for a message with ``properties``; None when the
        producer is not idempotent or the application numbers the message itself."""
        if not self.enabled or (properties and PRODUCER_ID_PROPERTY in properties):
            return None
        return self.producer_id, next(self._next)

    def stamp(self, message: Message) -> Message:
        """``message`` with the producer id and the next sequence added to its properties
        (the message itself is left as it is)."""
        numbered = self.for_properties(message.properties)
        if numbered is None:
            return message
        return Message(message.topic, message.body, message.key, message.tags,
                       idempotence_properties(message.properties, *numbered),
                       message.queue_id)

    def encode(self, topic: str, body: bytes, key: str | None, tags: str | None,
               properties: dict[str, str] | None, queue_id: int | None
               ) -> tuple[bytes, int | None]:
        """One message of a batch, encoded with the next sequence number; returns (its
        bytes, that number or None). Called again for a message that waited for buffer
        room, it takes a new number: the message is numbered in the order it is queued."""
        numbered = self.for_properties(properties)
        part = encode_message(topic, body, key, tags, properties, queue_id, numbered)
        return part, None if numbered is None else numbered[1]
