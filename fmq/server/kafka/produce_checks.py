"""The checks of a Produce partition's messages before they are stored: the ones
:meth:`fmq.engine.broker.Broker.check_messages` makes, with the same outcome and error, at a
cost per partition instead of per message.

A partition's messages share their topic and queue (the door gave them the partition's),
and the decoder tells whether each passes ``check_message``'s rules of its own fields that
depend on no setting (key, tags, properties: :func:`fmq.server.kafka.record_messages.
plain_largest`) and which has the largest body. What is left of the engine's checks then
holds for every message when it holds for that largest one:

* the topic's name rules (valid, not one of FMQ's own) and the queue id's range, once;
* the body limits, ``max_message_size`` and the topic's own (existence, its limit:
  ``Broker.check_plain_message`` of the largest message), as no other body is larger;
* the record's size in a segment: a checked message's record takes at most its body,
  ``RECORD_BOUND`` and ``MAX_PROPERTIES`` (fmq/log/record/sizes.py), so when that bound of
  the largest body fits a segment with its end filler, every record does.

Anything else (a message that is not plain, a largest body over a limit or past the bound)
goes through ``Broker.check_messages`` itself, which gives the error of the first message
it refuses, as the send path always did. tests/kafka/test_produce_checks.py holds the two
equal on any batch and settings.
"""

from __future__ import annotations

from collections.abc import Sequence

from fmq.engine.broker import Broker
from fmq.errors import FMQError
from fmq.log.record.layout import HEADER_SIZE
from fmq.log.record.sizes import RECORD_BOUND
from fmq.message import MAX_PROPERTIES, Message, is_internal_topic, valid_topic_name


def check_produced(broker: Broker, messages: Sequence[Message], largest: int) -> None:
    """Raise what ``broker.check_messages(messages)`` raises (nothing when it passes).
    ``messages``: one partition's, as the door's decoder made them (one topic, one queue);
    ``largest``: the decoder's index of the first with the largest body when each is plain,
    else -1."""
    if largest < 0:
        broker.check_messages(messages)
        return
    first = messages[largest]
    topic, queue, size = first.topic, first.queue_id, len(first.body)
    config = broker.config
    if (not valid_topic_name(topic) or is_internal_topic(topic) or type(queue) is not int
            or not 0 <= queue < broker.topics.queue_count(topic)
            or size > config.max_message_size
            or size + RECORD_BOUND + MAX_PROPERTIES + HEADER_SIZE > config.segment_size):
        broker.check_messages(messages)
        return
    try:
        broker.check_plain_message(first)
    except FMQError:
        # The first message over the topic's limit may come before the largest: the
        # engine's own loop names it.
        broker.check_messages(messages)
        raise
