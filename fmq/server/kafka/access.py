"""FMQ's users and access rules on the Kafka door: the log-in gate the dispatcher applies to
every request, and the per-resource check the handlers apply to the topics and groups a
request names, by the operation its API declares (:class:`fmq.server.kafka.apis.Access`).

Nothing is checked while the server has no users. Once it has users, a connection that has
not logged in (SaslHandshake, SaslAuthenticate) may send only ApiVersions and the handshake;
anything else closes it with a log line, as a Kafka broker closes an unauthenticated
connection. A node that has not read its users from etcd yet (``UsersNotLoaded`` on FMQ's
door) lets nobody in, log-ins included. A denied resource is answered with Kafka's own code
for its kind (TOPIC_, GROUP_, CLUSTER_AUTHORIZATION_FAILED), counted and logged as FMQ's
denials are (:func:`fmq.server.authz.denial`).

The API being answered is request-scoped: the dispatcher sets it (:func:`answering`) around
its handler, so a handler checks a resource without naming its own operation a second time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from kio.schema.errors import ErrorCode

from fmq.security import Operation, ResourceType
from fmq.security.acl import decide
from fmq.server.authz import denial
from fmq.server.kafka.apis import KafkaApi
from fmq.server.kafka.session import KafkaSession

#: The Kafka code of a denial, by the kind of resource denied.
DENIED: dict[ResourceType, ErrorCode] = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.PRODUCER_GROUP: ErrorCode.transactional_id_authorization_failed,
}

_ANSWERING: ContextVar[KafkaApi] = ContextVar("kafka_api_answering")


@contextmanager
def answering(api: KafkaApi) -> Iterator[None]:
    """Mark ``api`` as the one whose handler runs in this task."""
    token = _ANSWERING.set(api)
    try:
        yield
    finally:
        _ANSWERING.reset(token)


def enforcing(session: KafkaSession) -> bool:
    """Whether this server checks log-ins and rules (it has users, or does not know yet)."""
    authenticator = session.ctx.authenticator
    return authenticator is not None and authenticator.enforcing


def login_refusal(session: KafkaSession, api: KafkaApi) -> str | None:
    """Why ``api`` may not be answered on this connection at all, or None."""
    if not enforcing(session):
        return None
    if api.access is None:
        return (f"{api.name} declares no access need, and this server has users: it is "
                f"refused to everyone")
    if api.access.before_login:
        return None
    if not session.ctx.authenticator.users_known:
        return (f"{api.name} refused: this node has not read its users from etcd yet; the "
                f"client reconnects and logs in once it has (docs/security.md)")
    if session.principal is None:
        return (f"{api.name} before log-in: this server has users, so Kafka clients log in "
                f"with SASL (security.protocol=SASL_PLAINTEXT or SASL_SSL, "
                f"sasl.mechanism=SCRAM-SHA-256; docs/kafka.md)")
    return None


def refusal(session: KafkaSession, name: str) -> ErrorCode | None:
    """The Kafka code refusing the API being answered on resource ``name`` (of the kind the
    API declares), or None when the user may; a denial is counted and logged."""
    if not enforcing(session):
        return None
    api = _ANSWERING.get()
    need = api.access
    if need is None or need.resource is None:
        return None
    found = denial(session.ctx, session, need.operation, need.resource, name,
                   f"Kafka {api.name}")
    return None if found is None else DENIED[need.resource]


def visible(session: KafkaSession, name: str) -> bool:
    """Whether the user may see topic ``name`` in a listing (describe on it), without
    counting or logging the topics left out (FMQ's topic list filters the same way)."""
    return permits(session, Operation.DESCRIBE, ResourceType.TOPIC, name)


def permits(session: KafkaSession, operation: Operation, rtype: ResourceType,
            name: str) -> bool:
    """Whether the user may do ``operation`` on the resource, quietly (a second question a
    handler asks, such as Metadata's auto-create)."""
    if not enforcing(session):
        return True
    if session.principal is None:
        return False
    permitted, _ = decide(session.ctx.authenticator.store.rules, session.principal,
                          operation, rtype, name)
    return permitted
