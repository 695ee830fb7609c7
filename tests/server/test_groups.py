"""Consumer groups: queues split between members, taken over when one dies or goes silent."""

from __future__ import annotations

import subprocess
import threading
import time

import fmq
from fmq.client import Consumer, Producer
from fmq.server.ops.consumer_groups import ConsumerGroupCoordinator
from tests.crashkit import reap

from .conftest import FAST
from .harness import FMQ, json_lines, wait_until


def test_coordinator_assigns_each_queue_to_one_member():
    now = [0.0]
    g = ConsumerGroupCoordinator(queues_per_topic=4, session_timeout_ms=1000, clock=lambda: now[0])
    a, _, qa = g.join("g", None, ["t", "u"], owner="conn-a")
    assert sorted(qa) == [("t", q) for q in range(4)] + [("u", q) for q in range(4)]
    b, gen, _ = g.join("g", None, ["t"], owner="conn-b")
    _, qa = g.heartbeat("g", a, ["t", "u"], "conn-a")
    _, qb = g.heartbeat("g", b, ["t"], "conn-b")
    t_queues = sorted(q for t, q in qa + qb if t == "t")
    assert t_queues == [0, 1, 2, 3] and len(qb) == 2  # split, no queue twice
    assert sorted(q for t, q in qa if t == "u") == [0, 1, 2, 3]  # only a reads u
    now[0] = 0.9
    g.heartbeat("g", a, ["t", "u"], "conn-a")
    now[0] = 1.5  # b silent for 1.5 s > 1 s
    gen2, qa = g.heartbeat("g", a, ["t", "u"], "conn-a")
    assert gen2 > gen and len(qa) == 8
    g.join("g", b, ["t"], owner="conn-b")
    assert g.drop_owner("conn-b") == [("g", b)]
    assert g.leave("g", a) and g.groups == {}


def test_two_consumers_split_queues_and_take_over_when_one_dies(start_server):
    srv = start_server(FAST)
    a = Consumer(srv.address, "cg", "cgt")
    got_a: list[fmq.StoredMessage] = []
    assert len(a.assignment) == 4
    b = subprocess.Popen([*FMQ, "consume", "--server", srv.address, "--topic", "cgt",
                          "--group", "cg", "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(b.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        wait_until(lambda: len(a.assignment) == 2, 15, "b to join and take 2 queues",
                 tick=lambda: got_a.extend(a.poll(0.05)))
        mine = set(a.assignment)
        with Producer(srv.address) as p:
            first = [p.send("cgt", f"m{i}".encode()) for i in range(40)]
        wait_until(lambda: len(got_a) >= 20 and len(lines) >= 20, 15, "both to consume",
                 tick=lambda: (got_a.extend(a.poll(0.1)), a.commit()))
        got_b = json_lines("".join(lines))
        assert {(m.topic, m.queue_id) for m in got_a} == mine
        assert {("cgt", m["queue_id"]) for m in got_b}.isdisjoint(mine)
        assert len(got_a) == 20 and len(got_b) == 20
        assert len(first) == 40

        b.kill()  # SIGKILL: no leave; the server notices the closed connection
        b.wait(10)
        wait_until(lambda: len(a.assignment) == 4, 10, "a to take over b's queues",
                 tick=lambda: got_a.extend(a.poll(0.05)))
        with Producer(srv.address) as p:
            for i in range(40, 80):
                p.send("cgt", f"m{i}".encode())
        wait_until(lambda: {m.body for m in got_a} >= {f"m{i}".encode() for i in range(40, 80)},
                 15, "a to consume everything new", tick=lambda: got_a.extend(a.poll(0.1)))
        everything = {m.body for m in got_a} | {m["body"].encode() for m in got_b}
        assert everything == {f"m{i}".encode() for i in range(80)}

        # A member that stops heart-beating (connection still open) is dropped too.
        c = Consumer(srv.address, "cg", "cgt")
        wait_until(lambda: len(a.assignment) == 2, 10, "c to join",
                 tick=lambda: got_a.extend(a.poll(0.05)))
        c._stop.set()  # silence c's heartbeat thread; its socket stays open
        c._hb.join(5)
        t0 = time.monotonic()
        wait_until(lambda: len(a.assignment) == 4, 10, "c's session to expire",
                 tick=lambda: got_a.extend(a.poll(0.05)))
        assert time.monotonic() - t0 >= 0.8  # it waited for the session time-out (1.5 s)
        c.close()
    finally:
        b.kill()
        b.wait(10)
        reader.join(10)  # it ends at the pipe's EOF; then the pipe can be closed
        reap(b)
        a.close()


def test_coordinator_invariants_hold_for_random_membership_changes():
    """Property: after any sequence of joins, leaves, silences and closed connections, no
    queue is given to two members, members are given only queues of their topics, the
    rule's targets of a topic differ by at most one queue, and once every member
    heart-beat (releasing what it was told to drop) every queue of every subscribed topic
    has exactly one owner."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    topics = ["a", "b", "c"]
    step = st.tuples(st.sampled_from(["join", "leave", "tick", "drop", "beat"]),
                     st.integers(0, 5), st.sets(st.sampled_from(topics), min_size=1))

    @settings(max_examples=200, deadline=None)
    @given(st.integers(1, 6), st.lists(step, max_size=40))
    def check(queues, steps):
        now = [0.0]
        g = ConsumerGroupCoordinator(queues, session_timeout_ms=1000, clock=lambda: now[0])
        for action, who, subs in steps:
            mid = f"m{who}"
            if action == "join":
                g.join("grp", mid, sorted(subs), owner=who % 2)
            elif action == "beat" and "grp" in g.groups and mid in g.groups["grp"].members:
                g.heartbeat("grp", mid, list(g.groups["grp"].members[mid].topics), who % 2)
            elif action == "leave":
                g.leave("grp", mid)
            elif action == "drop":
                g.drop_owner(who % 2)
            elif action == "tick":
                now[0] += 0.6
                g.expire()
            grp = g.groups.get("grp")
            if grp is None:
                continue
            assert all(len(ms) <= 1 for ms in owners_of(grp).values())
            for t, targets in grp.owners.items():
                counts = [targets.count(m) for m, mem in grp.members.items()
                          if t in mem.topics]
                assert max(counts) - min(counts) <= 1
        grp = g.groups.get("grp")
        if grp is not None:
            for mid, m in list(grp.members.items()):
                g.heartbeat("grp", mid, sorted(m.topics), m.owner)
            owners = owners_of(grp)
            for t in {t for m in grp.members.values() for t in m.topics}:
                for q in range(queues):
                    assert len(owners.get((t, q), [])) == 1

    def owners_of(grp) -> dict[tuple[str, int], list[str]]:
        owners: dict[tuple[str, int], list[str]] = {}
        for m, qs in grp.assignment.items():
            for t, q in qs:
                assert t in grp.members[m].topics
                owners.setdefault((t, q), []).append(m)
        return owners

    check()
