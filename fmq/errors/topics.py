"""Errors of topic administration (``fmq topic``): a topic that does not exist, one that
does, a delete refused while consumer groups still have messages to read."""

from __future__ import annotations

from fmq.errors.input import InvalidArgument


class UnknownTopic(InvalidArgument):
    """A send to, or an operation on, a topic that does not exist (``auto_create_topics``
    off, a deleted topic, or describe/alter/delete of a name never created)."""

    code = 15
    fields = {"topic": str}
    message_format = ("topic {topic} does not exist (auto_create_topics is off, or it was "
                      "deleted); create it with: fmq topic create {topic}")

    def __init__(self, topic: str) -> None:
        super().__init__(self.message_format.format(topic=topic))
        self.topic = topic


class TopicExists(InvalidArgument):
    """``fmq topic create`` of a topic that exists (created, or made by a first send)."""

    code = 16
    fields = {"topic": str}
    message_format = ("topic {topic} exists already; change its settings with: "
                      "fmq topic alter {topic}")

    def __init__(self, topic: str) -> None:
        super().__init__(self.message_format.format(topic=topic))
        self.topic = topic


class TopicHasLag(InvalidArgument):
    """A delete of a topic on which consumer groups have not read everything."""

    code = 17
    fields = {"topic": str, "lag": str}
    message_format = ("topic {topic} still has messages consumer groups have not read "
                      "({lag}); let them catch up, or delete anyway with --force")

    def __init__(self, topic: str, lag: str) -> None:
        super().__init__(self.message_format.format(topic=topic, lag=lag))
        self.topic = topic
        self.lag = lag
