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


def test_a_follower_asked_for_an_unknown_topic_keeps_clients_asking(tmp_path):
    """With auto-creation on, a follower's Metadata for an unknown topic is
    LEADER_NOT_AVAILABLE (retriable: the client asks again, the primary creates it), not
    UNKNOWN_TOPIC_OR_PARTITION, and the follower creates nothing; without auto-creation it
    stays unknown."""
    from .wire import request_type

    primary = KafkaServer(str(tmp_path / "primary")).start()
    follower = KafkaServer(str(tmp_path / "follower"), {"follow": primary.address})
    try:
        follower.start()
        cls = request_type(3, 12)
        module = __import__(cls.__module__, fromlist=["x"])

        def ask(server, allow: bool):
            _, answer = exchange(("127.0.0.1", server.kafka_port), cls(
                topics=(module.MetadataRequestTopic(name="made-later", topic_id=None),),
                allow_auto_topic_creation=allow,
                include_topic_authorized_operations=False))
            return answer.topics[0].error_code

        assert ask(follower, True) == ErrorCode.leader_not_available
        assert ask(follower, False) == ErrorCode.unknown_topic_or_partition
        assert ask(primary, True) == ErrorCode.none  # created there, then copied
        produce_all(primary.bootstrap, "made-later", [(b"k", b"v", [])])
        [msg] = consume(follower.bootstrap, "made-later", 1)
        assert msg.value() == b"v"
    finally:
        follower.kill()
        primary.kill()
