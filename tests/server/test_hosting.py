"""The hosting check of a cluster node (fmq/server/cluster/hosting.py): which requests it refuses
with NotHosted, as a pure function of the node's copy of the routes and, on a primary,
the queues it has made."""

from __future__ import annotations

from fmq.coordination.routes import RouteSnapshot
from fmq.message import Message
from fmq.protocol import Op
from fmq.protocol.values import BROKER_PICKS_QUEUE
from fmq.server.cluster.hosting import not_hosted
from fmq.server.ops.operation import Hosted
from fmq.server.ops.table import OPERATIONS
from fmq.topic_route import expand, new_route

ROUTE = expand(new_route("t", ["g1"], 2), "g2", 2)  # g1: local 0-1; g2: local 0-1
SNAPSHOT = RouteSnapshot(7, {"t": ROUTE})


def _hosted(op: Op) -> Hosted | None:
    """What ``op`` declares it names (fmq/server/ops/operation.py)."""
    return OPERATIONS[op].hosted


def _send(queue_id: int, topic: str = "t") -> dict:
    """A SEND as the server decodes it (fmq.protocol.message_requests): a Message, whose
    queue_id None is the wire's BROKER_PICKS_QUEUE."""
    return {"message": Message(topic, b"", queue_id=None if queue_id == BROKER_PICKS_QUEUE
                               else queue_id)}


def test_a_queue_of_another_group_or_past_the_entry_is_not_hosted():
    assert not_hosted(SNAPSHOT, "g3", _hosted(Op.SEND), _send(0)) is not None
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.SEND), _send(2)) is not None
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.PULL), {"topic": "t", "queue_id": 5}) is not None
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.SEND), _send(1)) is None
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.SEND), _send(9, "other")) is None
    # A batch is refused for any message it holds that is not hosted here; SEND_AT and
    # PREPARE are read alike.
    batch = {"messages": [_send(1)["message"], _send(2)["message"]]}
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.SEND_BATCH), batch) is not None
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.SEND_BATCH), {"messages": batch["messages"][:1]}) is None
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.SEND_AT), _send(2)) is not None
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.PREPARE), batch) is not None
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.PREPARE), {"messages": batch["messages"][:1]}) is None


def test_a_primary_hosts_an_entrys_queue_only_once_it_has_made_it():
    """Just after an expand reached the node's copy, before the primary made the entry its
    local topic: NotHosted (retriable), where the broker said UnknownQueue (final) or made
    the topic with queues_per_topic queues."""
    refused = not_hosted(SNAPSHOT, "g2", _hosted(Op.SEND), _send(1), made={})
    assert refused is not None and refused.retriable
    assert (refused.topic, refused.group, refused.queue_id) == ("t", "g2", 1)
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.SEND), _send(BROKER_PICKS_QUEUE), made={}) is not None
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.PULL), {"topic": "t", "queue_id": 0},
                      made={}) is not None
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.SEND), _send(1), made={"t": 1}) is not None
    made = {"t": 2}
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.SEND), _send(1), made=made) is None
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.SEND), _send(BROKER_PICKS_QUEUE), made=made) is None
    assert not_hosted(SNAPSHOT, "g2", _hosted(Op.PULL), {"topic": "t", "queue_id": 0},
                      made=made) is None
