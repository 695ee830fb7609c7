"""Errors of user input: a malformed request, a bad configuration, a producer's sequence out of order."""

from __future__ import annotations

from fmq.errors.base import FMQError


class InvalidArgument(FMQError, ValueError):
    """A request is malformed: fix the arguments and try again."""

    code = 10


class MessageTooLarge(InvalidArgument):
    """A message exceeds ``BrokerConfig.max_message_size``."""

    code = 11


class UnknownQueue(InvalidArgument):
    """A queue id outside ``0 .. queues_per_topic - 1``."""

    code = 12


class GroupHasMembers(InvalidArgument):
    """An offset reset of a consumer group that has live members."""

    code = 14
    fields = {"group": str, "members": int}
    message_format = (
        "consumer group {group} has live members ({members}): they keep their own positions "
        "and would overwrite the reset. Stop them and retry, or pass --force")

    def __init__(self, group: str, members: int) -> None:
        super().__init__(self.message_format.format(group=group, members=members))
        self.group = group
        self.members = members


class GroupProtocolConflict(InvalidArgument):
    """An FMQ consumer joining a consumer group that has live Kafka members (the Kafka
    door's classic protocol): one group is driven by one protocol at a time."""

    code = 18
    fields = {"group": str, "members": int}
    message_format = (
        "consumer group {group} has live Kafka consumers ({members}) of the Kafka front "
        "door; a group is driven by one protocol at a time. Stop them or use another group "
        "name (both protocols share the committed offsets, docs/kafka.md)")

    def __init__(self, group: str, members: int) -> None:
        super().__init__(self.message_format.format(group=group, members=members))
        self.group = group
        self.members = members


class ConfigError(FMQError, ValueError):
    """A configuration value is out of range or inconsistent."""

    code = 13


class OutOfOrderSequence(FMQError):
    """An idempotent producer's sequence number too far below its last stored one: the
    broker no longer remembers whether that message was stored (docs/format.md)."""

    code = 90
    fields = {"producer": str, "sequence": int, "last": int, "window": int}
    message_format = (
        "sequence {sequence} of producer {producer} is more than {window} below its last "
        "stored sequence {last}: the broker no longer knows whether it was stored, so it "
        "stored nothing. Check the topic for it before sending it again under a new "
        "sequence, or raise dedup_window_messages")

    def __init__(self, producer: str, sequence: int, last: int, window: int) -> None:
        super().__init__(self.message_format.format(producer=producer, sequence=sequence,
                                                    last=last, window=window))
        self.producer = producer
        self.sequence = sequence
        self.last = last
        self.window = window


class ExtensionMissing(FMQError, ImportError):
    """``FMQ_REQUIRE_EXTENSIONS=1`` is set but a compiled module of FMQ is not installed
    (built without a C compiler, or from a source tree never built)."""

    code = 19
