"""Where a producer's messages go in a cluster (docs/cluster.md, docs/client.md "Routing"):
the broker group and queue of each message, given its topic's :class:`Route`. No I/O here.

* On a single route (a node outside a cluster) nothing is chosen: the producer sends as it
  always did, to its one group, and the server picks the queue (its key hash or round
  robin).
* In a cluster, the producer picks the queue: an unkeyed message goes round robin over the
  writable queues of the broker groups that have a primary and are not in a back-off; a
  keyed one to :func:`~fmq.topic_route.queue_for_key` (the one key rule the brokers share);
  a message naming a queue to that queue (``queue_id`` a global index, or a broker group's
  local id when the group is named).
* Messages stored together (a batch, a transaction) stay in one broker group, or
  :class:`SpansGroups` says why they cannot.
"""

from __future__ import annotations

from collections.abc import Iterable

from fmq.errors import InvalidArgument, RouteConflict
from fmq.topic_route import (
    QueueRef,
    index_of,
    key_slot,
    queue_at,
    queue_for_key,
    writable_queues,
)

from .route_table import Route


def unkeyed_queue(route: Route, turn: int, skipped: Iterable[str] = ()) -> QueueRef:
    """The queue of an unkeyed message, the ``turn``-th of its topic: round robin over the
    writable queues of the broker groups that have a primary, are open for writes and are
    not ``skipped`` (in a back-off). When every writable group is so, over all writable
    queues (the send then waits for a primary within the delivery deadline rather than
    fail)."""
    skip = set(skipped)
    queues = [q for q in writable_queues(route.route, route.broker_groups)
              if q.group not in skip]
    if not queues:
        queues = writable_queues(route.route)
    if not queues:
        raise RouteConflict(route.route.topic, "no broker group takes writes for it (every "
                                               "group is drained); expand it to a group first")
    return queues[turn % len(queues)]


def keyed_queue(route: Route, key: str) -> QueueRef:
    """The queue of a keyed message: the key's hash over the route's writable queues."""
    return queue_for_key(route.route, key)


def named_queue(route: Route, queue_id: int, broker_group: str | None = None) -> QueueRef:
    """The queue a message names: ``queue_id`` in ``broker_group`` when a group is named,
    else the queue with global index ``queue_id``."""
    if broker_group is None:
        return queue_at(route.route, queue_id)
    ref = QueueRef(broker_group, queue_id)
    index_of(route.route, ref)  # raises InvalidArgument when the route has no such queue
    return ref


def choose_queue(route: Route, key: str | None, queue_id: int | None,
                 broker_group: str | None, turn: int, skipped: Iterable[str] = ()
                 ) -> QueueRef:
    """The queue one message goes to in a cluster (see the module docstring)."""
    if queue_id is not None:
        return named_queue(route, queue_id, broker_group)
    if broker_group is not None:
        raise InvalidArgument("a message that names a broker group must name its queue_id "
                              "there too")
    if key:
        return keyed_queue(route, key)
    return unkeyed_queue(route, turn, skipped)


def confined_queue(route: Route, broker_group: str, key: str | None, queue_id: int | None,
                   turn: int) -> QueueRef | None:
    """The queue of a message confined to ``broker_group`` (a transaction's): its named
    queue (local id) if given, else its key's hash (or round robin) over the group's
    writable queues of the topic. None when the topic has no writable queue there."""
    entry = route.route.entry(broker_group)
    if entry is None or not entry.writable:
        return None
    if queue_id is not None:
        return named_queue(route, queue_id, broker_group)
    slot = key_slot(key, entry.queues) if key else turn % entry.queues
    return QueueRef(broker_group, slot)


class SpansGroups(InvalidArgument):
    """Messages that must be stored together (one batch, one transaction) would go to more
    than one broker group; nothing was sent."""


def place_in_group(routes: list[Route], broker_group: str, keys: list[str | None],
                   queue_ids: list[int | None], turn: int) -> list[QueueRef]:
    """The queues of messages confined to ``broker_group`` (a transaction's, or a batch's
    after its group is chosen): a named queue is a local queue id there, a key hashes over
    the group's queues of its topic, the rest go round robin from ``turn``. SpansGroups
    when a topic has no writable queue in ``broker_group``."""
    refs = []
    for i, (route, key, queue_id) in enumerate(zip(routes, keys, queue_ids, strict=True)):
        ref = confined_queue(route, broker_group, key, queue_id, turn + i)
        if ref is None:
            raise SpansGroups(
                f"topic {route.route.topic} has no writable queue in broker group "
                f"{broker_group}, where these messages are stored together (its writable "
                f"groups: "
                f"{', '.join(e.group for e in route.route.entries if e.writable) or 'none'}); "
                f"send them in separate batches or transactions, one per group")
        refs.append(ref)
    return refs


def place_batch(routes: list[Route], keys: list[str | None], queue_ids: list[int | None],
                broker_group: str | None, turn: int, skipped: Iterable[str] = ()
                ) -> list[QueueRef]:
    """The queues of one batch's messages, all in one broker group (a batch is stored all
    or none, by one group). Keyed and queue-naming messages keep the queue they would have
    alone; the unkeyed ones go to the group those name (or ``broker_group``), else to the
    group of the unkeyed choice of ``turn``. SpansGroups when they name several groups."""
    fixed = {i: choose_queue(r, k, q, broker_group, turn)
             for i, (r, k, q) in enumerate(zip(routes, keys, queue_ids, strict=True))
             if q is not None or k}
    named = sorted({ref.group for ref in fixed.values()}
                   | ({broker_group} if broker_group else set()))
    if len(named) > 1:
        raise SpansGroups(f"this batch's keys and queues lie in broker groups "
                          f"{', '.join(named)}, and a batch is stored by one group, all or "
                          f"none; send one batch per group (or use send_async)")
    chosen = named[0] if named else unkeyed_queue(routes[0], turn, skipped).group
    rest = [i for i in range(len(routes)) if i not in fixed]
    loose = dict(zip(rest, place_in_group([routes[i] for i in rest], chosen, [None] * len(rest),
                                          [None] * len(rest), turn), strict=True))
    return [fixed[i] if i in fixed else loose[i] for i in range(len(routes))]
