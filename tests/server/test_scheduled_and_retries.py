"""Scheduled delivery and retries over a real server on 127.0.0.1: delayed sends from the
sync and async producers, a failing handler seeing a message again after growing back-offs
and then in the dead-letter topic, redrive, and a SIGKILL of the server while messages wait
for their time or their retry."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

import fmq
from fmq.client import Client, Consumer, Producer
from fmq.client.aio import AsyncProducer
from fmq.errors import InvalidArgument
from fmq.message import dlq_topic
from fmq.protocol import Op
from tests.server.harness import broker_stats, json_lines, run_cli, wait_until

#: Short back-off levels so a test sees every redelivery within seconds.
FAST_RETRIES = {"checkpoint_interval_ms": 0, "retry_delays": "300ms 600ms 900ms",
                "max_reconsume_times": 3,
                "server": {"group_session_timeout_ms": 1500, "group_heartbeat_interval_ms": 200}}

pytestmark = pytest.mark.timeout(120)


def _collect(consumer: Consumer, want: int, seconds: float = 20.0) -> list[fmq.StoredMessage]:
    got: list[fmq.StoredMessage] = []
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        got += consumer.poll(0.5)
    return got


def test_delayed_and_timed_sends_become_consumable_at_their_time(start_server):
    srv = start_server(FAST_RETRIES)
    with Producer(srv.address) as p, Consumer(srv.address, "g", "later") as c:
        sent_at = int(time.time() * 1000)
        later = p.send("later", b"in-an-hour", delay=3600)
        soon = p.send("later", b"soon", key="k", delay=0.3)
        at = p.send("later", b"at", deliver_at=datetime.now(UTC) + timedelta(seconds=0.5))
        assert isinstance(soon, fmq.ScheduledSend) and later.deliver_at >= sent_at + 3_600_000
        got = _collect(c, 2)
        assert sorted(m.body for m in got) == [b"at", b"soon"]
        for m, due in ((m, {b"soon": soon, b"at": at}[m.body].deliver_at) for m in got):
            assert m.store_time >= due  # never before its time
        assert c.poll(0.3) == []  # the hour-long one waits
        with pytest.raises(InvalidArgument, match="exactly one"):
            p.send("later", b"x", delay=1, deliver_at=0)
        with pytest.raises(InvalidArgument, match="aware"):
            p.send("later", b"x", deliver_at=datetime.now())

    async def send_async() -> fmq.ScheduledSend:
        async with AsyncProducer(srv.address) as ap:
            return await ap.send("later", b"async", delay=timedelta(milliseconds=200))

    result = asyncio.run(send_async())
    with Consumer(srv.address, "g2", "later", start="earliest") as c:
        got = _collect(c, 3)
        assert sorted(m.body for m in got) == [b"as" + b"ync", b"at", b"soon"]
        assert result.offset > at.offset
    out = run_cli("produce", "--topic", "cli", "--body", "x", "--delay", "3600", "--server",
                  srv.address, "--json")
    assert out.returncode == 0, out.stderr
    [sent] = json_lines(out.stdout)
    assert sent["topic"] == "cli" and sent["deliver_at"] > sent_at + 3_500_000
    bad = run_cli("produce", "--topic", "cli", "--body", "x", "--deliver-at", "tomorrow",
                  "--server", srv.address)
    assert bad.returncode != 0 and "--deliver-at" in bad.stderr
    assert "Traceback" not in bad.stderr
    stats = json.loads(run_cli("stats", "--server", srv.address, "--json").stdout)
    assert stats["delivery"]["timers_pending"] == 2
    assert stats["delivery"]["timers_pending_by_topic"] == {"later": 1, "cli": 1}
    human = run_cli("stats", "--server", srv.address).stdout
    assert "SCHEDULED AND RETRIES" in human and "timers pending" in human


def test_a_failing_handler_sees_the_message_again_then_it_is_dead_and_redriven(start_server):
    srv = start_server(FAST_RETRIES)
    with Producer(srv.address) as p:
        p.send("orders", b"bad", key="o-1")
        p.send("orders", b"good")
    seen: list[tuple[float, fmq.StoredMessage]] = []

    def handler(m: fmq.StoredMessage) -> None:
        seen.append((time.monotonic(), m))
        if m.body == b"bad":
            raise ValueError("cannot process")

    c = Consumer(srv.address, "shop", "orders")
    runner = threading.Thread(target=c.run, args=(handler,))
    runner.start()
    try:
        listed = _wait_for_dead_letter(srv.address, "shop")
    finally:
        c.close()
        runner.join(10)
    bad = [(t, m) for t, m in seen if m.body == b"bad"]
    assert [m.reconsume_times for _t, m in bad] == [0, 1, 2, 3]
    assert [m.topic for _t, m in bad] == ["orders"] + ["%RETRY%shop"] * 3
    assert all(m.origin_topic == "orders" and m.key == "o-1" for _t, m in bad)
    gaps = [b[0] - a[0] for a, b in zip(bad, bad[1:], strict=False)]
    assert gaps[0] >= 0.3 and gaps[1] >= 0.6 and gaps[2] >= 0.9  # the back-off levels
    assert [m.body for _t, m in seen].count(b"good") == 1
    # After max_reconsume_times redeliveries, the fourth failure dead-lettered it.
    assert [d["body"] for d in listed] == ["bad"] and listed[0]["reconsume_times"] == 3
    # Another group reads the topic untouched: each message once, no retry, no dead letter.
    with Consumer(srv.address, "audit", "orders", start="earliest") as other:
        assert sorted(m.body for m in _collect(other, 2)) == [b"bad", b"good"]
        assert other.poll(0.5) == []
    assert json_lines(run_cli("dlq", "list", "audit", "--server", srv.address,
                              "--json").stdout) == []
    # Redrive: consumable again by the group, counted from 0.
    out = run_cli("dlq", "redrive", "shop", "--server", srv.address)
    assert out.returncode == 0 and "redrove 1 dead letter of" in out.stdout, out.stdout + out.stderr
    with Consumer(srv.address, "shop", "orders") as c:
        [again] = [m for m in _collect(c, 1) if m.body == b"bad"]
        assert again.reconsume_times == 0 and again.topic == "%RETRY%shop"
        c.commit()
    assert json_lines(run_cli("dlq", "list", "shop", "--server", srv.address,
                              "--json").stdout) == []


def _wait_for_dead_letter(address: str, group: str) -> list[dict]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        out = run_cli("dlq", "list", group, "--server", address, "--json")
        assert out.returncode == 0, out.stderr
        listed = json_lines(out.stdout)
        if listed:
            return listed
        time.sleep(0.1)
    raise AssertionError(f"no dead letter in {dlq_topic(group)}")


def test_a_server_kill_while_messages_wait_loses_none_and_delivers_each_once(start_server):
    srv = start_server(FAST_RETRIES)
    with Producer(srv.address) as p:
        p.send("orders", b"retry-me")
        dues = [p.send("timed", b"t%d" % i, delay=1.5 + i * 0.05).deliver_at for i in range(20)]
    with Consumer(srv.address, "g", "orders", retries=False) as c:
        [m] = _collect(c, 1)
        assert c.nack(m, delay=1.5) == 1
        c.commit()
    srv.kill()  # SIGKILL while 20 timers and one retry wait
    srv.start()
    with Consumer(srv.address, "g", ["orders", "timed"]) as c:
        got = _collect(c, 21, seconds=30)
        time.sleep(0.5)
        got += c.poll(0.5)  # nothing delivered twice
    bodies = sorted(m.body for m in got)
    assert bodies == sorted([b"retry-me"] + [b"t%d" % i for i in range(20)])
    timed = {m.body: m for m in got if m.topic == "timed"}
    assert all(timed[b"t%d" % i].store_time >= dues[i] for i in range(20))
    retried = [m for m in got if m.body == b"retry-me"]
    assert retried[0].reconsume_times == 1 and retried[0].topic == "%RETRY%g"


def _topic_messages(address: str) -> dict[str, int]:
    with Client(address, request_timeout=30) as c:
        return {t["topic"]: t["messages"]
                for t in json.loads(c.call(Op.TOPICS, {})["json"])["topics"]}


def _timers_pending(address: str) -> int:
    return broker_stats(address)["delivery"]["timers_pending"]


def test_concurrent_redrives_of_a_group_put_each_dead_letter_back_once(start_server):
    srv = start_server({**FAST_RETRIES, "max_reconsume_times": 0})  # the first nack: dead
    with Producer(srv.address) as p:
        sent = [p.send("orders", b"m%d" % i) for i in range(50)]
    with Client(srv.address, request_timeout=30) as c:
        for r in sent:
            nacked = c.call(Op.NACK, {"group": "billing", "topic": "orders",
                                      "queue_id": r.queue_id, "queue_offset": r.queue_offset,
                                      "delay_ms": -1})
            assert nacked["dead_letter"]
    wait_until(lambda: _topic_messages(srv.address).get("%DLQ%billing") == 50, 30,
               "50 dead letters")
    start = threading.Barrier(4)
    redriven: list[int] = []
    errors: list[BaseException] = []

    def redrive() -> None:
        try:
            with Client(srv.address, request_timeout=60) as c:
                start.wait(10)
                redriven.append(c.call(Op.DLQ_REDRIVE, {"group": "billing",
                                                        "max_messages": 10_000})["redriven"])
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=redrive) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert errors == [] and len(redriven) == 4
    wait_until(lambda: _timers_pending(srv.address) == 0, 30, "the redriven copies delivered")
    retried = _topic_messages(srv.address).get("%RETRY%billing")
    assert (retried, sum(redriven)) == (50, 50), f"redrives answered {redriven}"
    assert sorted(redriven)[:3] == [0, 0, 0]  # one redrive took them all, the rest nothing
    out = run_cli("dlq", "list", "billing", "--server", srv.address, "--json")
    assert out.returncode == 0 and json_lines(out.stdout) == []


def _timer_wakeups(c: Client) -> int:
    return broker_stats(c)["delivery"]["timer_wakeups"]


def test_an_idle_servers_timer_thread_sleeps_and_a_new_timer_still_fires(start_server):
    srv = start_server({})
    with Client(srv.address) as c:
        # Idle, nothing pending: the thread sleeps (a poll every timer_poll_ms would look
        # about a hundred times in this second).
        before = _timer_wakeups(c)
        time.sleep(1.0)
        idle = _timer_wakeups(c) - before
        assert idle <= 2, f"the idle timer thread looked {idle} times in a second"
        with Producer(srv.address) as p, Consumer(srv.address, "g", "idle") as consumer:
            p.send("idle", b"in-an-hour", delay=3600)
            # The hour-long timer is indexed and the thread asleep again until it is due
            # (or its idle recheck): only the index telling it of a new timer wakes it.
            wait_until(lambda: broker_stats(c)["delivery"]["timers_pending"] == 1,
                       what="the hour-long timer indexed")
            time.sleep(0.2)
            soon = p.send("idle", b"soon", delay=0.3)
            [m] = _collect(consumer, 1)
            assert m.body == b"soon" and m.store_time >= soon.deliver_at
            # Woken by the new timer, not by the idle recheck five seconds on.
            assert m.store_time - soon.deliver_at < 2500
            assert consumer.poll(0.3) == []
        assert broker_stats(c)["delivery"]["timers_pending"] == 1
