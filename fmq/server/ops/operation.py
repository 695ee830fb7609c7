"""One declaration per FMQ operation, written beside its handler: the handler and every fact
the server checks before it runs (the Kafka door declares its APIs the same way,
:mod:`fmq.server.kafka.apis`)::

    @operation(Op.SEND, access=on_sent_topics(PRODUCE), hosted=SENDS_ONE, follower=REFUSES)
    def _send(ctx, session, req): ...

* ``access`` (:class:`Access`): who may send it on a server with users: before log-in (the
  handshake) or only logged in, and which operation on which resources the request names
  it needs (checked by :func:`fmq.server.authz.refusal`; docs/security.md has the same
  table for people);
* ``hosted`` (:class:`Hosted` or None): the queues it names in a cluster's route, and
  whether it writes them (checked by :func:`fmq.server.cluster.hosting.not_hosted`);
* ``follower`` (:class:`Follower`): whether a follower refuses it, and a primary that
  cannot prove its lease refuses its answer (:mod:`fmq.server.cluster.fencing`).

Every fact is a required keyword: a declaration cannot leave one out. The declaration
only marks its handler; :mod:`fmq.server.ops.table` gathers the declarations of the
modules it lists into the one table the server reads, and a test keeps every opcode of
the protocol declared exactly once.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fmq.message import Message
from fmq.protocol import Op
from fmq.protocol.values import BROKER_PICKS_QUEUE
from fmq.security import Operation, ResourceType

#: Called with the server's context, the session the request came on and the decoded
#: request; returns an awaitable of the response fields.
Handler = Callable[[Any, Any, dict], Awaitable[dict]]

# ---------------------------------------------------------------- access

#: An operation on a resource: (operation, resource type, resource name).
Need = tuple[Operation, ResourceType, str]
#: The resources a request touches, from the server's context and the decoded request.
Needs = Callable[[Any, dict], Iterable[Need]]


@dataclass(frozen=True)
class Access:
    """What an operation needs on a server with users: ``needs`` gives the operation on each
    resource its request names (None: a log-in only, or not even that: ``before_login``,
    the handshake; ``before_users_known``: also while the node has not read its users)."""

    needs: Needs | None
    before_login: bool = False
    before_users_known: bool = False


#: PING and HELLO: open to every session, even on a node that does not know its users yet.
HANDSHAKE = Access(None, before_login=True, before_users_known=True)
#: The log-in itself: open to every session before it logged in.
BEFORE_LOGIN = Access(None, before_login=True)
#: Any logged-in user; what the answer shows is filtered where it is made.
LOGGED_IN = Access(None)

TOPIC, GROUP, PGROUP = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.PRODUCER_GROUP
CLUSTER_NAME = "cluster"


def needs(fn: Needs) -> Access:
    """An operation whose resources ``fn`` names."""
    return Access(fn)


def on_topic(operation: Operation) -> Access:
    """``operation`` on the topic the request names in its ``topic`` field."""
    return Access(lambda ctx, req: [(operation, TOPIC, req["topic"])])


def on_group(operation: Operation) -> Access:
    """``operation`` on the consumer group the request names in its ``group`` field."""
    return Access(lambda ctx, req: [(operation, GROUP, req["group"])])


def on_producer_group(operation: Operation) -> Access:
    """``operation`` on the producer group the request names. A transaction is its
    (group, id), so the request can only ever touch a transaction of that group, whenever
    it runs and whatever other groups do with the id: a check that cannot go stale between
    admission and the operation (one made on the transaction open at admission could)."""
    return Access(lambda ctx, req: [(operation, PGROUP, req["producer_group"])])


def on_cluster(operation: Operation) -> Access:
    """``operation`` on the cluster (the operator's requests)."""
    return Access(lambda ctx, req: [(operation, ResourceType.CLUSTER, CLUSTER_NAME)])


def on_sent_topics(operation: Operation) -> Access:
    """``operation`` on the topic of each message the request carries."""
    def sent(ctx: Any, req: dict) -> list[Need]:
        if "message" in req:
            return [(operation, TOPIC, req["message"].topic)]
        return [(operation, TOPIC, t) for t in {m.topic for m in req["messages"]}]
    return Access(sent)


# ---------------------------------------------------------------- hosted queues

#: (topic, queue id) a request names; BROKER_PICKS_QUEUE: a send that lets the broker pick.
Named = Callable[[dict], Iterable[tuple[str, int]]]


@dataclass(frozen=True)
class Hosted:
    """The queues a request names (``named``) and whether it stores messages in them
    (``write``: it needs a writable entry of this broker group; else any entry)."""

    named: Named
    write: bool


def _sent(message: Message) -> tuple[str, int]:
    return message.topic, BROKER_PICKS_QUEUE if message.queue_id is None else message.queue_id


#: A request storing one message (a Message object, fmq.protocol.message_requests).
SENDS_ONE = Hosted(lambda req: (_sent(req["message"]),), write=True)
#: A request storing a list of messages.
SENDS_MANY = Hosted(lambda req: {_sent(m) for m in req["messages"]}, write=True)
#: A request about one queue: its ``topic`` and ``queue_id`` fields.
ONE_QUEUE = Hosted(lambda req: ((req["topic"], req["queue_id"]),), write=False)


# ---------------------------------------------------------------- followers


class Follower(enum.Enum):
    """What a follower does with the operation."""

    #: A write (a follower's log changes only by what its primary ships) or feedback that
    #: would end transactions: a follower refuses it (NotPrimary), a primary that cannot
    #: prove its lease refuses its answer (LeadershipLost).
    REFUSES = "refuses"
    #: A read, or a request about the node itself: served by any node.
    SERVES = "serves"


REFUSES, SERVES = Follower.REFUSES, Follower.SERVES


# ---------------------------------------------------------------- the declaration


@dataclass(frozen=True)
class FmqOperation:
    op: Op
    handler: Handler
    access: Access
    hosted: Hosted | None
    follower: Follower


#: The attribute a declared handler carries its declaration in.
DECLARATION = "fmq_operation"


def operation(op: Op, *, access: Access, hosted: Hosted | None,
              follower: Follower) -> Callable[[Handler], Handler]:
    """Declare the decorated handler as operation ``op``, with its facts (all required)."""
    def declare(fn: Handler) -> Handler:
        setattr(fn, DECLARATION, FmqOperation(op, fn, access, hosted, follower))
        return fn
    return declare


def declaration_of(value: Any) -> FmqOperation | None:
    """The declaration ``value`` carries, if it is a declared handler."""
    return getattr(value, DECLARATION, None)
