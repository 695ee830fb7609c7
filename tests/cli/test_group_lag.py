"""A consumer group's lag covers every queue of every topic it subscribes to, the queues it
never committed in too: ``fmq groups``, ``fmq topic delete``'s refusal and the lag metrics,
against a real server driven by the real ``fmq`` commands (issue 37, items 6 and 8)."""

from __future__ import annotations

import pytest

from fmq.client import Consumer
from tests.ops.test_metrics import scrape
from tests.server.conftest import FAST
from tests.server.harness import (
    ServerProcess,
    broker_stats,
    free_port,
    json_lines,
    run_cli,
    wait_until,
)

QUEUES = 4  # the broker's queues_per_topic by default


@pytest.fixture
def server(tmp_path):
    port = free_port()
    srv = ServerProcess(str(tmp_path / "data"),
                        {**FAST, "server": {**FAST["server"], "metrics_port": port}}).start()
    srv.metrics_port = port
    yield srv
    srv.kill()


def fmq_ok(*args: str) -> str:
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def five_of_twenty_read(server: ServerProcess) -> None:
    """The issue's sequence: 20 messages over the topic's queues, group gl2 reads 5."""
    fmq_ok("produce", "--server", server.address, "--topic", "lagt2", "--body", "m{i}",
           "--count", "20", "--batch", "10")
    fmq_ok("consume", "--server", server.address, "--topic", "lagt2", "--group", "gl2",
           "--max", "5")
    # Lag is read from the index, which takes each durable message a moment after its send.
    wait_until(lambda: broker_stats(server.address)["index_lag"] == 0, 30,
               "the index to take every message")


def lag_series(samples: dict, name: str, topic: str) -> dict[int, float]:
    return {int(dict(labels)["queue"]): v for (n, labels), v in samples.items()
            if n == name and dict(labels).get("topic") == topic}


def test_delete_is_refused_while_queues_the_group_never_committed_in_are_unread(server):
    five_of_twenty_read(server)
    refused = run_cli("topic", "delete", "lagt2", "--server", server.address)
    assert refused.returncode == 1, refused.stdout
    assert "group gl2" in refused.stderr and "--force" in refused.stderr, refused.stderr
    [group] = json_lines(fmq_ok("groups", "gl2", "--server", server.address, "--json"))
    rows = {r["queue_id"]: r for r in group["offsets"] if r["topic"] == "lagt2"}
    assert sorted(rows) == list(range(QUEUES))
    assert sum(r["lag"] for r in rows.values()) == 15
    for r in rows.values():  # each queue's true lag, from its first retained offset
        start = r["min_offset"] if r["committed"] is None else r["committed"]
        assert r["lag"] == r["next_offset"] - start
    assert sum(r["next_offset"] for r in rows.values()) == 20
    table = fmq_ok("groups", "gl2", "--server", server.address)
    assert table.count("lagt2") == QUEUES, table
    # Still there: nothing was deleted.
    assert "lagt2" in fmq_ok("topic", "list", "--server", server.address)


def test_the_lag_metric_counts_queues_the_group_never_committed_in(server):
    five_of_twenty_read(server)
    samples = scrape(server.metrics_port)
    lag = lag_series(samples, "fmq_consumer_lag_messages", "lagt2")
    assert sorted(lag) == list(range(QUEUES)) and sum(lag.values()) == 15
    committed = lag_series(samples, "fmq_consumer_committed_offset", "lagt2")
    assert committed and set(committed) <= set(lag)  # an offset only where one was committed
    assert sum(lag_series(samples, "fmq_consumer_lag_seconds", "lagt2").values()) > 0


def test_a_deleted_topic_has_no_lag_or_offset_series(server):
    five_of_twenty_read(server)
    assert lag_series(scrape(server.metrics_port), "fmq_consumer_lag_messages", "lagt2")
    fmq_ok("topic", "delete", "lagt2", "--force", "--server", server.address)
    samples = scrape(server.metrics_port)
    for name in ("fmq_consumer_lag_messages", "fmq_consumer_lag_seconds",
                 "fmq_consumer_committed_offset"):
        assert lag_series(samples, name, "lagt2") == {}, name
    groups = json_lines(fmq_ok("groups", "--server", server.address, "--json"))
    assert [r for g in groups for r in g["offsets"] if r["topic"] == "lagt2"] == []


def test_a_live_member_subscribes_its_group_before_any_commit(server):
    fmq_ok("produce", "--server", server.address, "--topic", "lagt3", "--body", "m{i}",
           "--count", "8", "--batch", "8")
    wait_until(lambda: broker_stats(server.address)["index_lag"] == 0, 30,
               "the index to take every message")
    with Consumer(server.address, "live", ["lagt3"]):  # joined, nothing read or committed
        [group] = json_lines(fmq_ok("groups", "live", "--server", server.address, "--json"))
        rows = [r for r in group["offsets"] if r["topic"] == "lagt3"]
        assert [r["queue_id"] for r in rows] == list(range(QUEUES))
        assert sum(r["lag"] for r in rows) == 8 and {r["committed"] for r in rows} == {None}
        refused = run_cli("topic", "delete", "lagt3", "--server", server.address)
        assert refused.returncode == 1 and "group live" in refused.stderr, refused.stderr
        lag = lag_series(scrape(server.metrics_port), "fmq_consumer_lag_messages", "lagt3")
        assert sum(lag.values()) == 8
