"""One reader per queue at a time (fmq/server/ops/queue_handover.py): a queue the rule moves to
another member reaches it only once its holder released it, and no two members are ever
given one queue, whatever the order of joins, syncs, heartbeats, leaves and expiries."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.server.ops.consumer_groups import ConsumerGroupCoordinator

T = "t"


def coordinator(now: list[float], queues: int = 4) -> ConsumerGroupCoordinator:
    return ConsumerGroupCoordinator(queues, session_timeout_ms=1000, clock=lambda: now[0])


def test_a_moved_queue_reaches_its_new_member_only_once_the_holder_synced_past_it():
    now = [0.0]
    c = coordinator(now)
    _, gen_a, qa = c.join("g", "a", [T], "conn-a")
    assert qa == [(T, q) for q in range(4)]
    _, gen_b, qb = c.join("g", "b", [T], "conn-b")
    assert qb == []  # a still holds every queue: b waits
    gen, qa = c.heartbeat("g", "a", [T], "conn-a", applied=gen_a)  # a read its old answer
    assert len(qa) == 2  # told to drop two queues...
    assert c.heartbeat("g", "b", [T], "conn-b", applied=gen_b)[1] == []  # ...not released
    gen2, qa2 = c.heartbeat("g", "a", [T], "conn-a", applied=gen)  # a applied that answer
    assert qa2 == qa and gen2 > gen  # released: a new generation gives them to b
    _, qb = c.heartbeat("g", "b", [T], "conn-b", applied=gen_b)
    assert sorted(qa2 + qb) == [(T, q) for q in range(4)] and len(qb) == 2


def test_a_generation_never_answered_to_the_member_releases_nothing():
    """A generation of the primary before a fail-over (or a made-up one) is not an answer
    this coordinator gave: the queue stays with its holder."""
    now = [0.0]
    c = coordinator(now)
    c.join("g", "a", [T], "conn-a")
    c.join("g", "b", [T], "conn-b")
    gen, _ = c.heartbeat("g", "a", [T], "conn-a", applied=0)
    for applied in (0, gen + 1, gen + 10**9):
        c.heartbeat("g", "a", [T], "conn-a", applied=applied)
        assert c.heartbeat("g", "b", [T], "conn-b", applied=0)[1] == []


def test_a_member_that_does_not_apply_its_answer_holds_the_queue_one_session_at_most():
    now = [0.0]
    c = coordinator(now)
    c.join("g", "a", [T], "conn-a")
    c.join("g", "b", [T], "conn-b")
    c.heartbeat("g", "a", [T], "conn-a", applied=0)  # told to drop two queues
    now[0] = 0.9
    c.heartbeat("g", "a", [T], "conn-a", applied=0)  # still heart-beating, never applied
    assert c.heartbeat("g", "b", [T], "conn-b", applied=0)[1] == []
    now[0] = 1.1  # a session time-out after it was told
    c.heartbeat("g", "a", [T], "conn-a", applied=0)
    assert len(c.heartbeat("g", "b", [T], "conn-b", applied=0)[1]) == 2


def test_leaving_expiring_or_closing_releases_at_once():
    now = [0.0]
    c = coordinator(now)
    c.join("g", "a", [T], "conn-a")
    c.join("g", "b", [T], "conn-b")
    assert c.leave("g", "a")
    assert len(c.heartbeat("g", "b", [T], "conn-b", applied=0)[1]) == 4
    c.join("g", "a", [T], "conn-a")  # a waits for b now
    assert c.heartbeat("g", "a", [T], "conn-a", applied=0)[1] == []
    c.drop_owner("conn-b")
    assert len(c.heartbeat("g", "a", [T], "conn-a", applied=0)[1]) == 4


def test_a_queue_given_back_before_it_was_released_stays_with_its_holder():
    now = [0.0]
    c = coordinator(now)
    gen_a = c.join("g", "a", [T], "conn-a")[1]
    c.join("g", "b", [T], "conn-b")  # two of a's queues move to b...
    assert c.leave("g", "b")  # ...and back before a released them
    gen, qa = c.heartbeat("g", "a", [T], "conn-a", applied=gen_a)
    assert qa == [(T, q) for q in range(4)]


step = st.tuples(st.sampled_from(["join", "sync", "stale", "beat", "leave", "drop", "tick"]),
                 st.integers(0, 4), st.sets(st.sampled_from(["t", "u"]), min_size=1))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5), st.lists(step, max_size=50))
def test_no_queue_is_ever_given_to_two_members(queues, steps):
    """Clients that apply each answer before their next sync (``sync``), lag behind it
    (``stale``), or only heart-beat (``beat``), with joins, leaves, closed connections and
    expiries: at every step no queue is in two members' assignments, and a member is given
    a queue only while it holds it."""
    now = [0.0]
    c = coordinator(now, queues)
    answered: dict[str, int] = {}  # the generation of each member's last answer
    for action, who, subs in steps:
        mid = f"m{who}"
        grp = c.groups.get("grp")
        member = grp.members.get(mid) if grp is not None else None
        if action == "join":
            answered[mid] = c.join("grp", mid, sorted(subs), owner=who % 2)[1]
        elif action in ("sync", "stale", "beat") and member is not None:
            applied = {"sync": answered.get(mid, 0), "stale": 0, "beat": None}[action]
            answered[mid] = c.heartbeat("grp", mid, sorted(member.topics), who % 2,
                                        applied=applied)[0]
        elif action == "leave":
            c.leave("grp", mid)
        elif action == "drop":
            c.drop_owner(who % 2)
        elif action == "tick":
            now[0] += 0.4
            c.expire()
        grp = c.groups.get("grp")
        if grp is None:
            continue
        given_to: dict[tuple[str, int], str] = {}
        for m, qs in grp.assignment.items():
            for q in qs:
                assert q not in given_to, (q, m, given_to[q])
                given_to[q] = m
                assert grp.holders[q[0]][q[1]] == m
