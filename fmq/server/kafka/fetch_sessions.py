"""Fetch sessions (KIP-227) as a Kafka broker answers when it keeps none.

A client that supports sessions asks for one with a full fetch (session epoch 0, the
initial epoch) and, when the answer gives it a session id, sends only the changed
partitions afterwards (epoch 1, 2, ...). FMQ keeps no sessions: every answer carries
session id 0 (Kafka's "no session was created"), so the client's next fetch is full again.
A full fetch is one with epoch 0 or -1 (-1: sessionless, as librdkafka always asks),
whatever session id it names. An incremental fetch (any other epoch) names partitions
relative to a session this server never gave out: it is answered, as Kafka answers for a
session it does not hold, with FETCH_SESSION_ID_NOT_FOUND and no partitions, never as if
its partitions were the whole request, and the client falls back to a full fetch.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

#: The session id of an answer that created no session.
NO_SESSION = 0
#: Session epochs of a full fetch: 0 asks for a new session, -1 for none.
FULL_FETCH_EPOCHS = (0, -1)


def session_refusal(request: Any) -> dict | None:
    """Fetch's whole answer when ``request`` is incremental (a session FMQ does not hold);
    None for a full fetch, which is served."""
    if getattr(request, "session_epoch", -1) in FULL_FETCH_EPOCHS:
        return None
    return {"throttle_time": 0, "error_code": ErrorCode.fetch_session_id_not_found,
            "session_id": NO_SESSION, "responses": []}
