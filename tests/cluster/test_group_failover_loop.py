"""The fail-over kill loop on one broker group of a cluster while another keeps taking
writes, every invariant checked per group.

Group g1 is three ``fmq server`` processes in ``sync`` mode electing through a real etcd;
g2 is one node of the same cluster (acknowledging after its own fdatasync). Topic ``orders`` has four queues in each. Routing
producers (given every node of both groups) send unkeyed messages over both groups; one
writer names a queue of g2 only; transactional producers keep their transactions in g1
(PREPARE, COMMIT or ROLLBACK, and check-backs answered from their own decision). A killer
SIGKILLs g1's primary at random moments and restarts it (it comes back as a follower);
before the first kill one more transaction is prepared in g1, and committed on g1's next
primary.

Checked: during every fail-over g2 stored writes; afterwards, per group, each
acknowledged send is readable exactly once on every node of the group that acknowledged
it, an unacknowledged one at most once, committed transactions wholly and rolled-back ones
not at all; g1's logs are byte-identical; the fault suite's invariants hold on every data
directory against that group's acknowledgements; a consumer group reading both groups
throughout consumed every acknowledged message.

The kills are drawn from a seed printed on failure; ``FMQ_JEPSEN_SEED`` replays one.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter

import pytest

from fmq.client import TransactionProducer
from fmq.coordination.routes import ClusterRoutes
from fmq.message import Message, SendResult
from fmq.tx.state import TxState
from tests.etcdkit import ETCD
from tests.replication.failover_kit import (
    GROUP_CONFIG,
    QUEUES,
    TOPIC,
    FailoverGroup,
    GroupConsumer,
    History,
    acknowledged_messages,
    check_consumed,
    check_data_dir,
    check_readable_soon,
    plain_producer,
    tx_producer,
    wait_no_open_transactions,
)
from tests.server.harness import ServerProcess, wait_until

from .kit import CLUSTER, RESYNC_MS

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

KILLS = 4
CONFIG = {**GROUP_CONFIG,
          "server": {**GROUP_CONFIG["server"], "route_resync_ms": RESYNC_MS}}
#: g2 is one node: it acknowledges after its own fdatasync (no follower to wait for).
CONFIG_G2 = {k: v for k, v in CONFIG.items() if k not in ("ack_mode", "min_insync")}
PATIENT = {"request_timeout": 10.0, "retries": 8, "backoff_max": 0.5}


class GroupHistory(History):
    """A History whose acknowledged sends also say which broker group stored them (and
    when), so each group's checks read only its own."""

    def __init__(self) -> None:
        super().__init__()
        self.stored_at: list[tuple[float, str]] = []  # (monotonic time, group) of each ack

    def acked_send(self, mid: str, result: SendResult) -> None:
        super().acked_send(mid, result)
        with self._lock:
            self.acks[-1]["group"] = result.group
            self.stored_at.append((time.monotonic(), result.group))

    def of_group(self, group: str, tx_group: str) -> History:
        """What ``group`` was asked to keep: every attempt (an unacknowledged one may be
        in either group, at most once), the sends it acknowledged, and the transactions
        when it is ``tx_group``."""
        view = History()
        with self._lock:
            view.plan = list(self.plan)
            view.acks = [a for a in self.acks
                         if a.get("group", tx_group) == group]
            if group == tx_group:
                view.decisions = dict(self.decisions)
                view.tx_messages = dict(self.tx_messages)
        return view


def test_one_group_fails_over_repeatedly_while_the_other_takes_writes(tmp_path):
    seed = int(os.environ.get("FMQ_JEPSEN_SEED", time.time_ns() % 1_000_000))
    print(f"seed {seed} (FMQ_JEPSEN_SEED={seed} replays the kills)")
    rng = random.Random(seed)
    (tmp_path / "g1").mkdir()
    g1 = FailoverGroup(str(tmp_path / "g1"), config=CONFIG, group="g1",
                       cluster=CLUSTER).start()
    g2 = ServerProcess(str(tmp_path / "g2"), CONFIG_G2, extra_args=(
        "--coordinator", g1.etcd.url, "--cluster-name", CLUSTER, "--group", "g2",
        "--node", "g2-n1")).start()
    history = GroupHistory()
    stop, done = threading.Event(), threading.Event()
    errors: list = []
    consumer = None
    windows: list[tuple[float, float]] = []  # each fail-over: kill to new primary
    try:
        g1.wait_whole()
        routes = ClusterRoutes(g1.etcd.url, CLUSTER)
        wait_until(lambda: {n for n, g in routes.groups().items() if g.writable}
                   == {"g1", "g2"}, 30, "both groups registered with a primary")
        route = routes.create(TOPIC, QUEUES, ["g1", "g2"])
        g2_queue = route.entry("g2").base  # a global index: g2's local queue 0
        servers = f"{g1.servers},{g2.address}"
        workers = [threading.Thread(target=plain_producer, args=(
            k, random.Random(seed * 100 + k), servers, history, stop, errors, PATIENT))
            for k in range(2)]
        workers.append(threading.Thread(target=plain_producer, args=(
            2, random.Random(seed * 100 + 2), servers, history, stop, errors, PATIENT,
            g2_queue)))
        workers += [threading.Thread(target=tx_producer, args=(
            k, random.Random(seed * 100 + 50 + k), servers, history, stop, errors, done,
            PATIENT, "g1")) for k in range(2)]
        consumer = GroupConsumer(servers).start()  # reads both groups throughout
        for w in workers:
            w.start()
        wait_until(lambda: {g for _t, g in history.stored_at} == {"g1", "g2"}, 60,
                   "sends stored in both groups")
        new = None
        across = TransactionProducer(servers, "across", lambda _u: TxState.UNKNOWN, **PATIENT)
        for kill in range(KILLS):
            primary = g1.wait_whole()
            assert new is None or primary is new, "the restarted node took the lease back"
            time.sleep(rng.uniform(0.2, 1.5))
            if kill == 0:  # prepared on this primary, committed on the next one
                mids = ["across-0", "across-1", "across-2"]
                bodies = history.attempt_tx("tx-across", mids, 200)
                across.prepare([Message(TOPIC, b) for b in bodies], tx_id="tx-across",
                               group="g1")
                history.acked("prepare", "tx-across")
                history.decide("tx-across", "commit")
            killed_at = time.monotonic()
            primary.kill()  # SIGKILL: no shutdown code runs
            new = g1.wait_primary(among=g1.others(primary))
            windows.append((killed_at, time.monotonic()))
            if kill == 0:
                assert across.commit("tx-across") == TxState.COMMIT
                history.acked("commit", "tx-across")
                across.close()
            primary.start()  # back as a follower; it cuts what the new term never had
        assert g1.wait_whole() is new
        stop.set()
        wait_no_open_transactions(g1.servers)
        done.set()
        for w in workers:
            w.join(60)
        assert not any(w.is_alive() for w in workers), "a producer did not finish"

        for start, end in windows:
            in_g2 = [t for t, g in history.stored_at if g == "g2" and start <= t <= end]
            assert in_g2, (f"g2 stored nothing during g1's fail-over of {end - start:.1f}s "
                           f"(the other group must keep taking writes)")
        per_group = {g: sum(1 for a in history.acks if a.get("group") == g)
                     for g in ("g1", "g2")}
        per_producer = Counter((a["ids"][0].split("-")[0], a["group"])
                               for a in history.acks if "group" in a)
        assert per_group["g1"] > 20 and per_group["g2"] > 20, per_group
        assert history.acked_ops("commit"), "no transaction committed"

        g1.assert_identical()
        check_readable_soon(g1, history.of_group("g1", "g1"))
        g2_view = history.of_group("g2", "g1")
        check_readable_soon(_Single(g2), g2_view)
        consumer.wait_for(acknowledged_messages(history))
        consumer.stop()
        check_consumed(consumer.consumed, history)
        g2.stop()
        g1.stop()
        for node in g1.nodes:
            check_data_dir(node.data_dir, CONFIG, history.of_group("g1", "g1"), str(tmp_path))
        check_data_dir(g2.data_dir, CONFIG_G2, g2_view, str(tmp_path))
    except AssertionError as exc:
        raise AssertionError(
            f"seed {seed} after {len(windows)} fail-overs ({len(history.acks)} acks, "
            f"{len(errors)} unacknowledged attempts): {exc}\n{g1.logs()}") from exc
    finally:
        stop.set()
        done.set()
        if consumer is not None:
            consumer.stop()
        g2.kill()
        g1.kill()
    print(f"{len(windows)} fail-overs of g1 ({', '.join(f'{e - s:.1f}s' for s, e in windows)}); "
          f"acknowledged sends per group {per_group} (by producer {dict(per_producer)}); "
          f"{len(history.acked_ops('commit'))} commits; {len(errors)} unacknowledged attempts")


class _Single:
    """A one-node group as check_readable_soon reads it."""

    def __init__(self, node: ServerProcess) -> None:
        self.nodes = [node]
