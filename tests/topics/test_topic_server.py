"""``fmq topic`` and the client's topic methods on a real server: settings with units,
human and JSON output, grow-only queues, delete refused with lag, and the topic's rules
(existence with ``auto_create_topics`` off, ``max_message_size``) on every send path:
SEND, SEND_BATCH, SEND_AT, PREPARE and idempotent sends."""

from __future__ import annotations

import pytest

import fmq
from fmq.client import Client, Producer, TransactionProducer
from fmq.errors import InvalidArgument, MessageTooLarge, TopicHasLag, UnknownTopic
from tests.server.conftest import FAST
from tests.server.harness import json_lines, run_cli

pytestmark = pytest.mark.timeout(300)


def fmq_cli(server, *args: str):
    return run_cli(*args, "--server", server.address)


def test_cli_create_describe_alter_list_delete(start_server):
    srv = start_server(FAST)
    out = fmq_cli(srv, "topic", "create", "orders", "--queues", "8", "--retention", "7d",
                  "--max-message-size", "1KiB", "--json")
    assert out.returncode == 0, out.stderr
    created = json_lines(out.stdout)[0]
    assert (created["queues"], created["retention_ms"], created["max_message_size"]) == (
        8, 7 * 86_400_000, 1024)
    human = fmq_cli(srv, "topic", "describe", "orders")
    assert "7.0 d" in human.stdout and "1.0 KiB" in human.stdout, human.stdout
    again = fmq_cli(srv, "topic", "create", "orders")
    assert again.returncode == 1 and "fmq topic alter orders" in again.stderr
    shrink = fmq_cli(srv, "topic", "alter", "orders", "--queues", "4")
    assert shrink.returncode == 1 and "queues only grow" in shrink.stderr
    grown = fmq_cli(srv, "topic", "alter", "orders", "--queues", "10", "--retention",
                    "default", "--json")
    t = json_lines(grown.stdout)[0]
    assert (t["queues"], t["retention_ms"], t["max_message_size"]) == (10, None, 1024)
    with Producer(srv.address) as p:
        p.send("clicks", b"made by a first send")
    listing = json_lines(fmq_cli(srv, "topic", "list", "--json").stdout)
    assert [(t["name"], t["queues"], t["auto_created"]) for t in listing] == [
        ("clicks", 4, True), ("orders", 10, False)]
    table = fmq_cli(srv, "topic", "list").stdout
    assert "orders" in table and "1.0 KiB" in table
    deleted = fmq_cli(srv, "topic", "delete", "orders")
    assert deleted.returncode == 0, deleted.stderr
    gone = fmq_cli(srv, "topic", "describe", "orders")
    assert gone.returncode == 1 and "fmq topic create orders" in gone.stderr


def test_delete_is_refused_while_a_group_has_lag_unless_forced(start_server):
    srv = start_server(FAST)
    with Client(srv.address) as admin, Producer(srv.address) as p:
        admin.create_topic("orders", queues=1)
        for i in range(4):
            p.send("orders", b"m%d" % i)
        admin.call(fmq.protocol.Op.COMMIT_OFFSET, {"group": "billing", "topic": "orders",
                                                   "queue_id": 0, "next_offset": 1})
        with pytest.raises(TopicHasLag, match="group billing queue 0: 3 unread"):
            admin.delete_topic("orders")
        refused = fmq_cli(srv, "topic", "delete", "orders")
        assert refused.returncode == 1 and "--force" in refused.stderr
        assert admin.delete_topic("orders", force=True)["state"] == "deleted"
        rng = admin.call(fmq.protocol.Op.QUEUE_RANGE, {"topic": "orders", "queue_id": 0})
        assert (rng["min_offset"], rng["next_offset"]) == (4, 4)
        with pytest.raises(UnknownTopic):
            p.send("orders", b"late")
        admin.create_topic("orders")
        assert p.send("orders", b"again").queue_offset == 4  # offsets continue


def _every_send_path(address: str, topic: str, body: bytes) -> dict[str, BaseException]:
    """The error each send path gets for one message of ``body`` to ``topic``."""
    errors: dict[str, BaseException] = {}
    msg = fmq.Message(topic, body)
    with Producer(address, idempotent=False) as plain, Producer(address) as idem:
        for name, send in (
                ("SEND", lambda: plain.send(topic, body)),
                ("SEND_BATCH", lambda: plain.send_batch([msg])),
                ("SEND_AT", lambda: plain.send(topic, body, delay=60)),
                ("idempotent SEND", lambda: idem.send(topic, body)),
                ("idempotent SEND_BATCH", lambda: idem.send_batch([msg]))):
            try:
                send()
            except fmq.FMQError as exc:
                errors[name] = exc
    with TransactionProducer(address, "shop", lambda tx: fmq.TxState.ROLLBACK) as tp:
        try:
            tp.prepare([msg])
        except fmq.FMQError as exc:
            errors["PREPARE"] = exc
    return errors


PATHS = {"SEND", "SEND_BATCH", "SEND_AT", "idempotent SEND", "idempotent SEND_BATCH", "PREPARE"}


def test_auto_create_off_refuses_every_send_path_to_an_unknown_topic(start_server):
    srv = start_server({**FAST, "auto_create_topics": False})
    errors = _every_send_path(srv.address, "nowhere", b"x")
    assert set(errors) == PATHS
    for name, exc in errors.items():
        assert type(exc) is UnknownTopic, (name, exc)
        assert "fmq topic create nowhere" in str(exc)
    with Client(srv.address) as admin:
        admin.create_topic("nowhere")
    assert _every_send_path(srv.address, "nowhere", b"x") == {}


def test_a_topics_max_message_size_holds_on_every_send_path(start_server):
    srv = start_server(FAST)
    with Client(srv.address) as admin:
        admin.create_topic("small", max_message_size=100)
    errors = _every_send_path(srv.address, "small", b"x" * 101)
    assert set(errors) == PATHS
    for name, exc in errors.items():
        assert type(exc) is MessageTooLarge, (name, exc)
        assert "limit of topic 'small'" in str(exc) and "100" in str(exc)
    assert _every_send_path(srv.address, "small", b"x" * 100) == {}
    with Client(srv.address) as admin:
        admin.alter_topic("small", max_message_size=0)  # back to the broker's
        assert admin.describe_topic("small")["max_message_size"] is None
    assert _every_send_path(srv.address, "small", b"x" * 101) == {}


def test_refused_settings_are_typed_errors_over_the_wire(start_server):
    srv = start_server({**FAST, "retention_ms": "1h"})
    with Client(srv.address) as admin:
        with pytest.raises(InvalidArgument, match="longer than the broker's retention_ms"):
            admin.create_topic("t", retention_ms=2 * 3_600_000)
        bad = fmq_cli(srv, "topic", "create", "t", "--retention", "soon")
        assert bad.returncode == 2 and "--retention" in bad.stderr
        assert admin.list_topics() == []


def test_fmq_consume_reads_a_topic_with_fewer_queues_than_the_default(start_server):
    srv = start_server({**FAST, "queues_per_topic": 4})
    with Client(srv.address) as admin, Producer(srv.address) as p:
        admin.create_topic("few", queues=2)
        admin.create_topic("quiet", queues=1)
        p.send("few", b"hello", queue_id=1)
    got = fmq_cli(srv, "consume", "--topic", "few", "--group", "g", "--max", "1",
                  "--idle-timeout", "5", "--json")
    assert got.returncode == 0, got.stderr
    assert [m["body"] for m in json_lines(got.stdout)] == ["hello"]
    idle = fmq_cli(srv, "consume", "--topic", "quiet", "--group", "g", "--max", "1",
                   "--idle-timeout", "1")
    assert idle.returncode == 0, idle.stderr
    assert "topic 'quiet' has no consumable message yet" in idle.stderr
