"""FMQ's typed errors as Kafka error codes (kio's ErrorCode), with the message kept for the
answers that carry one."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from fmq.errors import (
    AccessDenied,
    BrokerClosed,
    InvalidArgument,
    MessageTooLarge,
    NotEnoughReplicas,
    NotPrimary,
    OutOfOrderSequence,
    ServerBusy,
    TopicExists,
    TopicHasLag,
    UnknownQueue,
    UnknownTopic,
)

#: Most specific first: a subclass before its base.
_CODES: list[tuple[type[BaseException], ErrorCode]] = [
    (MessageTooLarge, ErrorCode.message_too_large),
    (UnknownTopic, ErrorCode.unknown_topic_or_partition),
    (UnknownQueue, ErrorCode.unknown_topic_or_partition),
    (TopicExists, ErrorCode.topic_already_exists),
    (TopicHasLag, ErrorCode.policy_violation),
    (InvalidArgument, ErrorCode.invalid_record),
    (OutOfOrderSequence, ErrorCode.out_of_order_sequence_number),
    (NotPrimary, ErrorCode.not_leader_or_follower),
    (NotEnoughReplicas, ErrorCode.not_enough_replicas),
    (ServerBusy, ErrorCode.request_timed_out),
    (BrokerClosed, ErrorCode.request_timed_out),
    (AccessDenied, ErrorCode.topic_authorization_failed),
]


def error_code(exc: BaseException) -> ErrorCode:
    """Kafka's code for ``exc`` (UNKNOWN_SERVER_ERROR for anything unmapped)."""
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return ErrorCode.unknown_server_error
