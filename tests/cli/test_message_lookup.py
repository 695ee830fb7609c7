"""Finding a message: ``fmq message get`` (by topic, queue and offset) and ``fmq message
find`` (by key), and the client's ``get_message`` / ``query_key``, against a real server on
127.0.0.1."""

from __future__ import annotations

import os
import time

import pytest

from fmq.client import Client, Producer
from fmq.errors import OffsetOutOfRange
from tests.server.harness import ServerProcess, json_lines, run_cli


@pytest.fixture
def server(tmp_path):
    srv = ServerProcess(str(tmp_path / "data")).start()
    yield srv
    srv.kill()


@pytest.fixture
def sent(server):
    """Messages with keys in two topics: (key, topic) -> SendResult."""
    results = {}
    with Producer(server.address) as p:
        for i in range(6):
            results[(f"order-{i}", "orders")] = p.send(
                "orders", f"order {i}".encode(), key=f"order-{i}", tags="new",
                properties={"region": "eu"})
        results[("order-1", "audit")] = p.send("audit", b"\xff\xfe binary", key="order-1")
    return results


def test_the_client_gets_a_message_by_its_offset(server, sent):
    r = sent[("order-3", "orders")]
    with Client(server.address) as c:
        m = c.get_message("orders", r.queue_id, r.queue_offset)
        assert (m.body, m.key, m.tags, m.properties["region"]) == (b"order 3", "order-3",
                                                                   "new", "eu")
        assert m.offset == r.offset and m.store_time > 0
        with pytest.raises(OffsetOutOfRange, match="it holds offsets 0 to"):
            c.get_message("orders", r.queue_id, 10_000)


def test_the_client_finds_messages_by_key(server, sent):
    with Client(server.address) as c:
        found = c.query_key("orders", "order-1")
        assert [m.body for m in found] == [b"order 1"]
        assert c.query_key("orders", "order-1", since_ms=int(time.time() * 1000) + 60_000) == []
        assert c.query_key("orders", "no-such-key") == []


def test_message_get_prints_key_tags_properties_date_and_log_offset(server, sent):
    r = sent[("order-2", "orders")]
    out = run_cli("message", "get", "--server", server.address, "--topic", "orders",
                  "--queue", str(r.queue_id), "--offset", str(r.queue_offset))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"orders queue {r.queue_id} offset {r.queue_offset}" in text
    assert "order-2" in text and "new" in text and "region=eu" in text
    assert "UTC" in text and str(r.offset) in text and "'order 2'" in text
    assert "None" not in text and "{" not in text  # no Python reprs of empty values
    [d] = json_lines(run_cli("message", "get", "--server", server.address, "--topic",
                             "orders", "--queue", str(r.queue_id), "--offset",
                             str(r.queue_offset), "--json").stdout)
    assert d["key"] == "order-2" and d["offset"] == r.offset and d["body"] == "order 2"


def test_message_get_and_find_name_the_segment_file_holding_the_message(tmp_path):
    # Small segments: the messages lie in several files, so the right one must be chosen.
    srv = ServerProcess(str(tmp_path / "small"), {"segment_size": 64 * 1024,
                                                  "max_message_size": 16 * 1024}).start()
    try:
        with Producer(srv.address) as p:
            results = [p.send("big", bytes([65 + i % 26]) * 12_000, key=f"k{i}", queue_id=0)
                       for i in range(12)]
        segments = sorted(os.listdir(os.path.join(srv.data_dir, "log")))
        holding = {}
        for r in results:
            holding[r.queue_offset] = max(n for n in segments if int(n.split(".")[0]) <= r.offset)
        assert len(set(holding.values())) > 1, segments  # the messages span segments
        for r in (results[0], results[-1]):
            args = ("message", "get", "--server", srv.address, "--topic", "big", "--queue",
                    "0", "--offset", str(r.queue_offset))
            text = run_cli(*args).stdout
            assert f"segment     {holding[r.queue_offset]}" in text, text
            [d] = json_lines(run_cli(*args, "--json").stdout)
            assert d["segment"] == holding[r.queue_offset]
        [d] = json_lines(run_cli("message", "find", "--server", srv.address, "--key", "k11",
                                 "--topic", "big", "--json").stdout)
        assert d["segment"] == holding[results[11].queue_offset]
    finally:
        srv.kill()


def test_message_get_of_a_missing_offset_says_what_the_queue_holds(server, sent):
    out = run_cli("message", "get", "--server", server.address, "--topic", "orders",
                  "--queue", "0", "--offset", "999")
    assert out.returncode == 1 and "no message at offset 999" in out.stderr
    assert "Traceback" not in out.stderr


def test_message_find_searches_every_topic_unless_one_is_named(server, sent):
    out = run_cli("message", "find", "--server", server.address, "--key", "order-1",
                  "--json")
    assert out.returncode == 0, out.stderr
    found = json_lines(out.stdout)
    assert sorted(d["topic"] for d in found) == ["audit", "orders"]
    assert [d for d in found if d["topic"] == "audit"][0]["body_base64"]
    out = run_cli("message", "find", "--server", server.address, "--key", "order-1",
                  "--topic", "orders")
    assert out.returncode == 0 and "audit" not in out.stdout and "order 1" in out.stdout
    out = run_cli("message", "find", "--server", server.address, "--key", "order-1",
                  "--since", "2999-01-01T00:00:00")
    assert out.returncode == 1 and "no message with key 'order-1'" in out.stderr
    out = run_cli("message", "find", "--server", server.address, "--key", "nothing")
    assert out.returncode == 1 and "no message with key 'nothing'" in out.stderr


def test_a_message_lookup_of_an_unknown_topic_is_a_clear_error(server, sent):
    out = run_cli("message", "get", "--server", server.address, "--topic", "bad topic!",
                  "--queue", "0", "--offset", "0")
    assert out.returncode != 0 and "invalid topic" in out.stderr
    assert "Traceback" not in out.stderr
