"""The durable state of Kafka transactional ids: one record per change, in the internal
topic ``%KAFKA_TXN`` (one queue, key = the transactional id, body = the state as JSON).

They are ordinary MESSAGE records of the one log, so they are fsync'd, replicated to the
followers and found again after a restart like every other record; the latest record of an
id is its state. A state change is acknowledged only once its record is durable (and, in
``sync`` acknowledgement mode, held by the followers: the caller writes through
``ServerContext.write``).

The messages a transaction produces are not here: each Produce of a transaction is an FMQ
prepared transaction of the producer group :data:`PRODUCER_GROUP` (docs/kafka.md,
*Exactly-once*); this record only says which producer id and epoch own the id, whether a
transaction is open, and, once EndTxn decided, which way (``prepare_commit`` /
``prepare_abort``: the decision recovery rolls forward) and the consumer offsets that commit
with it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from fmq.engine.broker import Broker
from fmq.message import Message

TOPIC = "%KAFKA_TXN"
#: The FMQ producer group of every Kafka transaction's prepared messages.
PRODUCER_GROUP = "%kafka"

EMPTY = "empty"
ONGOING = "ongoing"
PREPARE_COMMIT = "prepare_commit"
PREPARE_ABORT = "prepare_abort"
STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT)


@dataclass
class TxnState:
    """One transactional id as the coordinator knows it."""

    transactional_id: str
    producer_id: int
    epoch: int
    state: str = EMPTY
    timeout_ms: int = 60_000
    #: Wall-clock ms the open transaction began (its time-out counts from here).
    started_ms: int = 0
    #: How many transactions this id began: the open one's number is in its FMQ
    #: transaction ids, so a producer numbering its batches afresh after an abort never
    #: meets the ids of the aborted transaction.
    number: int = 0
    #: Consumer offsets sent with the open transaction: [group, topic, partition, offset].
    offsets: list[list] = field(default_factory=list)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, body: bytes) -> TxnState:
        values = json.loads(body)
        state = cls(**values)
        if state.state not in STATES:
            raise ValueError(f"unknown Kafka transaction state {state.state!r}")
        return state

    @property
    def fmq_prefix(self) -> str:
        """What the FMQ transaction ids of this producer's transaction start with."""
        return f"{self.producer_id}.{self.epoch}.{self.number}."


def load_states(broker: Broker) -> dict[str, TxnState]:
    """The latest state of every transactional id, read from :data:`TOPIC` (blocking)."""
    states: dict[str, TxnState] = {}
    broker.wait_indexed(5.0)
    offset, high = broker.reads.queue_range(TOPIC, 0)
    while offset < high:
        batch = broker.reads.pull(TOPIC, 0, offset, 256)
        if not batch:
            break
        for stored in batch:
            states[stored.key] = TxnState.from_json(stored.body)
        offset = batch[-1].queue_offset + 1
    return states


def write_state(broker: Broker, state: TxnState, durable: bool = True) -> int:
    """Append ``state`` as the latest record of its id; returns the log offset its record
    ends at, once it is durable, or with ``durable`` False at once: the next record anyone
    makes durable takes it along (the log is durable as a prefix)."""
    message = Message(TOPIC, state.to_json(), key=state.transactional_id, queue_id=0)
    _, end = broker.place_batch([message], checked=True)
    if durable:
        broker.wait_durable(end)
    return end
