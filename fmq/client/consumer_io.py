"""The consumer's requests that need none of its state: a pull's wait, the follower reads'
client, and committing offsets pipelined."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from fmq.errors import FMQError
from fmq.protocol import Op

from .base import Client
from .discovery import ANY

Queue = tuple[str, int]


def pull_wait_ms(deadline: float) -> int:
    """How long a pull sent now may wait on the server: up to ``deadline``, at most 1 s."""
    return int(min(max(deadline - time.monotonic(), 0.0), 1.0) * 1000)


def reads_client(servers: str | Sequence[str], options: dict[str, Any],
                 read_server: str | None) -> Client:
    """The client of a consumer's follower reads: the first of ``servers`` that answers,
    ``read_server`` first, with the consumer's other ``options``."""
    return Client(servers, **{**options, "node": ANY, "preferred_server": read_server})


def commit_offsets(client: Client, consumer_group: str, due: list[tuple[Queue, int]]
                   ) -> Iterator[tuple[Queue, int]]:
    """Commit each (queue, next offset) of ``due`` for ``consumer_group``, yielding it once
    stored.
    Sent together, not one after the other: the server writes each as a log record and
    answers after the fdatasync, so pipelined they share one group commit."""

    def fields(q: Queue, pos: int) -> dict[str, Any]:
        return {"group": consumer_group, "topic": q[0], "queue_id": q[1], "next_offset": pos}

    sent: list[tuple[Queue, int, Future | None]] = []
    for q, pos in due:
        try:
            sent.append((q, pos, client.submit(Op.COMMIT_OFFSET, fields(q, pos))))
        except FMQError as exc:
            if not exc.retriable:
                raise
            sent.append((q, pos, None))  # not sent: the retrying call below sends it
    for q, pos, fut in sent:
        try:
            if fut is not None:
                fut.result(client.request_timeout)
        except (FMQError, FutureTimeout) as exc:
            if isinstance(exc, FMQError) and not exc.retriable:
                raise
            fut = None
        if fut is None:  # the same value again: safe whether or not it was stored
            client.call(Op.COMMIT_OFFSET, fields(q, pos))
        yield q, pos
