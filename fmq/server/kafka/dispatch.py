"""One request in, its answer out: the handler of its API and version, or the protocol's own
error.

* An API key this server does not implement: a response header and UNSUPPORTED_VERSION (the
  layout of an unknown API's answer cannot be known; clients only send keys that
  ApiVersions advertised).
* A version outside an API's range: UNSUPPORTED_VERSION; for ApiVersions, as Kafka does, a
  version 0 answer carrying the error and the supported ranges, so that a newer client
  falls back to a version both sides speak.
* A request whose bytes do not match its schema: :class:`MalformedRequest`, and the
  connection is closed (Kafka closes it too: nothing after such bytes can be trusted).
* On a server with users, a request before log-in other than ApiVersions and the SASL
  handshake (:func:`fmq.server.kafka.access.login_refusal`): :class:`NotLoggedIn`, and the
  connection is closed, as a Kafka broker closes it; clients reconnect and log in.
"""

from __future__ import annotations

import logging

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from fmq.server.kafka.access import answering, login_refusal
from fmq.server.kafka.apis import API_TABLE, supported_apis
from fmq.server.kafka.counters import UNSUPPORTED
from fmq.server.kafka.entities import build
from fmq.server.kafka.framing import (
    FrameError,
    encode_bare_error,
    encode_response,
    read_head,
    read_request,
)
from fmq.server.kafka.session import KafkaSession

logger = logging.getLogger("fmq.server.kafka")

API_VERSIONS_KEY = 18


class MalformedRequest(FrameError):
    """A request whose bytes do not match its API's schema."""


class NotLoggedIn(FrameError):
    """A request this connection may not send before log-in (or at all, before this node
    has read its users)."""


async def answer(session: KafkaSession, frame: bytes) -> bytes | None:
    """The framed answer to ``frame``, or None when it takes none."""
    head = read_head(frame)
    api = API_TABLE.get(head.api_key)
    session.counters.request(api.name if api is not None else UNSUPPORTED)
    if api is None:
        logger.info("kafka connection %s: API key %d is not implemented; answered "
                    "UNSUPPORTED_VERSION", session.peer, head.api_key)
        return encode_bare_error(head.correlation_id, ErrorCode.unsupported_version)
    if not api.serves(head.api_version):
        logger.info("kafka connection %s: %s version %d is not served (%d..%d); answered "
                    "UNSUPPORTED_VERSION", session.peer, api.name, head.api_version,
                    api.min_version, api.max_version)
        if head.api_key == API_VERSIONS_KEY:
            return encode_response(head.correlation_id, build(
                load_response_schema(API_VERSIONS_KEY, 0),
                {"error_code": ErrorCode.unsupported_version, "api_keys": supported_apis()}))
        return encode_bare_error(head.correlation_id, ErrorCode.unsupported_version)
    refused = login_refusal(session, api)
    if refused is not None:
        raise NotLoggedIn(refused)
    try:
        request = read_request(frame, load_request_schema(head.api_key, head.api_version))
    except Exception as exc:  # kio raises several kinds for bytes off the schema
        raise MalformedRequest(f"{api.name} v{head.api_version} request does not match its "
                               f"schema ({type(exc).__name__}: {exc})") from None
    with answering(api):
        values = await api.handler(session, request, head.api_version)
    if values is None:
        return None
    if api.answer_writer is not None:
        return api.answer_writer(head.correlation_id, head.api_version, values)
    response_type = load_response_schema(head.api_key, head.api_version)
    return encode_response(head.correlation_id, build(response_type, values))
