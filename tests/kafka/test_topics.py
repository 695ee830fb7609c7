"""CreateTopics and DeleteTopics through Kafka's AdminClient map onto FMQ's topics: the
partitions are the queues, and FMQ's own rules (a delete refused while a group lags) hold."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from fmq.client import Client, Producer
from fmq.protocol import Op


def test_create_and_delete_topics_map_onto_fmq_topics(shared_kafka_server):
    srv = shared_kafka_server
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    admin.create_topics([NewTopic("made-by-kafka", num_partitions=6)])["made-by-kafka"].result(
        30)
    with Client(srv.address) as client:
        described = client.call(Op.TOPIC_DESCRIBE, {"topic": "made-by-kafka"})["json"]
    assert '"queues": 6' in described
    assert len(admin.list_topics("made-by-kafka", timeout=10)
               .topics["made-by-kafka"].partitions) == 6
    again = admin.create_topics([NewTopic("made-by-kafka", num_partitions=1)])["made-by-kafka"]
    try:
        again.result(30)
        raise AssertionError("a second create succeeded")
    except KafkaException as exc:
        assert exc.args[0].name() == "TOPIC_ALREADY_EXISTS"
    admin.delete_topics(["made-by-kafka"])["made-by-kafka"].result(30)
    assert "made-by-kafka" not in admin.list_topics(timeout=10).topics


def test_a_delete_while_a_group_has_not_read_everything_is_refused(shared_kafka_server):
    srv = shared_kafka_server
    with Producer(srv.address) as producer:
        producer.send("lagging", b"unread", queue_id=0)
        producer.send("lagging", b"unread too", queue_id=0)
    with Client(srv.address) as client:  # group "slow" read one of the two
        client.call(Op.COMMIT_OFFSET, {"group": "slow", "topic": "lagging", "queue_id": 0,
                                       "next_offset": 1})
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    try:
        admin.delete_topics(["lagging"])["lagging"].result(30)
        raise AssertionError("the delete succeeded")
    except KafkaException as exc:
        assert exc.args[0].name() == "POLICY_VIOLATION"
    assert "lagging" in admin.list_topics(timeout=10).topics
