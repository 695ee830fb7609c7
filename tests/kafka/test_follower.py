"""A follower's Kafka door refuses writes as its FMQ door does (its log changes only by what
its primary ships) and serves reads of what it copied."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from .conftest import KafkaServer
from .test_clients import consume, produce_all
from .test_wire import batch, produce_request
from .wire import exchange


def test_a_follower_refuses_kafka_writes_and_serves_copied_reads(tmp_path):
    primary = KafkaServer(str(tmp_path / "primary")).start()
    follower = KafkaServer(str(tmp_path / "follower"), {"follow": primary.address})
    try:
        follower.start()
        produce_all(primary.bootstrap, "copied", [(b"k", b"from the primary", [])])
        _, answer = exchange(("127.0.0.1", follower.kafka_port),
                             produce_request("copied", batch(b"to the follower")))
        [part] = answer.responses[0].partition_responses
        assert part.error_code == ErrorCode.not_leader_or_follower
        assert primary.address in (part.error_message or "")
        [msg] = consume(follower.bootstrap, "copied", 1)  # once it copied it
        assert msg.value() == b"from the primary"
    finally:
        follower.kill()
        primary.kill()


def test_a_follower_refuses_transactional_requests(tmp_path):
    import datetime

    from .wire import request_type

    primary = KafkaServer(str(tmp_path / "primary")).start()
    follower = KafkaServer(str(tmp_path / "follower"), {"follow": primary.address})
    try:
        follower.start()
        address = ("127.0.0.1", follower.kafka_port)
        _, ids = exchange(address, request_type(22, 4)(
            transactional_id="on-a-follower",
            transaction_timeout=datetime.timedelta(seconds=60)))
        assert ids.error_code == ErrorCode.not_leader_or_follower
        _, ended = exchange(address, request_type(26, 3)(
            transactional_id="on-a-follower", producer_id=1, producer_epoch=0,
            committed=True))
        assert ended.error_code == ErrorCode.not_leader_or_follower
    finally:
        follower.kill()
        primary.kill()
