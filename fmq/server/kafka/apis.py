"""The table of implemented Kafka APIs: each handler registered beside the versions it serves
and the access it needs (:class:`Access`, docs/kafka.md has the same table for people).

ApiVersions advertises exactly this table, and the dispatcher serves nothing else. A handler
gets the connection's :class:`~fmq.server.kafka.session.KafkaSession`, the decoded request
entity and its version, and returns the answer's values as nested dicts (built into the
version's response entity by :func:`fmq.server.kafka.entities.build`), or None when the
request takes no answer (a Produce with acks=0).

Access is declared here, once per API, and enforced in two places: the dispatcher lets a
connection that has not logged in send only the APIs declared :data:`BEFORE_LOGIN` (on a
server with users), and a handler asks :func:`fmq.server.kafka.access.refusal` for each
topic or group its request names, which checks the declared operation on it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fmq.security import Operation, ResourceType

Handler = Callable[[Any, Any, int], Awaitable[dict | None]]
#: Writes a handler's values as the framed answer: (correlation id, version, values) -> bytes.
AnswerWriter = Callable[[int, int, dict], bytes]


@dataclass(frozen=True)
class Access:
    """What an API needs on a server with users: FMQ's ``operation`` on each resource of
    kind ``resource`` its request names, checked by its handler; with no resource, a log-in
    only (or not even that, ``before_login``: the handshake)."""

    resource: ResourceType | None
    operation: Operation | None
    before_login: bool = False


#: Answered before log-in: ApiVersions and the SASL handshake.
BEFORE_LOGIN = Access(None, None, before_login=True)
#: Any logged-in user; what the request then does is checked where it happens.
LOGGED_IN = Access(None, None)


def on_topics(operation: Operation) -> Access:
    return Access(ResourceType.TOPIC, operation)


def on_groups(operation: Operation) -> Access:
    return Access(ResourceType.GROUP, operation)


#: A transactional producer's requests: FMQ's ``transaction`` on the producer group named
#: by its transactional id (Kafka's TransactionalId resource).
ON_TRANSACTIONAL_ID = Access(ResourceType.PRODUCER_GROUP, Operation.TRANSACTION)


@dataclass(frozen=True)
class KafkaApi:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler
    #: None: not declared; refused to every connection of a server with users (a test
    #: keeps every registered API declared).
    access: Access | None = None
    #: None: the answer is built into kio's response entity and written by kio; else the
    #: API's own writer of the same bytes (Produce's, answered per record batch).
    answer_writer: AnswerWriter | None = None

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


API_TABLE: dict[int, KafkaApi] = {}


def kafka_api(key: int, name: str, min_version: int, max_version: int,
              access: Access | None = None,
              answer_writer: AnswerWriter | None = None) -> Callable[[Handler], Handler]:
    """Register the decorated handler as API ``key`` for versions min..max, needing
    ``access`` (its answers written by ``answer_writer`` when given)."""
    def register(fn: Handler) -> Handler:
        if key in API_TABLE:
            raise RuntimeError(f"Kafka API {key} ({name}) is registered twice")
        API_TABLE[key] = KafkaApi(key, name, min_version, max_version, fn, access,
                                  answer_writer)
        return fn
    return register


def supported_apis() -> list[dict]:
    """The table as ApiVersions answers it, by key."""
    return [{"api_key": api.key, "min_version": api.min_version,
             "max_version": api.max_version} for _, api in sorted(API_TABLE.items())]
