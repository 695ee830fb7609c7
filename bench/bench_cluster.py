"""Broker groups: what a second group buys, and how fast producers find a group's new
primary (docs/performance.md, "Broker groups", records the results).

1. **Throughput** (default): per round, (a) one broker group of one node with a topic of
   8 queues and (b) two broker groups of one node each with a topic of 4 queues in each
   (``fmq topic create T --queues-per-group``), each a fresh set of real ``fmq server``
   processes in one cluster of a real etcd. ``--producers`` routing producers
   (``fmq.client.Producer``, one per thread, each its own connection, spread over 4 client
   processes; ``fmq bench produce`` is not used because it sends every request to the one
   server it is given, which in a cluster keeps all the load in that server's group) send
   1 KiB messages, one in flight each, for ``--seconds``. (a) runs first in odd rounds and
   (b) in even ones. Reported: msgs/s and p99 per set-up (medians of the rounds), the
   ratio, and each server's CPU (user + system, ``/proc/PID/stat``) per message it stored,
   from which the rate of groups on machines of their own follows.
2. ``--failover``: two groups of two nodes each (``async``, ``lease_ttl_s = 3``) and one routing producer given every node, 4 threads sending
   unkeyed messages steadily; g1's primary is SIGKILLed and the time from the kill to the
   first acknowledged send stored in g1 again (on its new primary) is taken, with the sends
   g2 acknowledged meanwhile and the longest gap between two of them. The killed node is
   restarted and both groups are whole again before the next of ``--kills``.

On one machine the groups share its cores and disk. Not part of the test run. Run from
the repository root::

    python bench/bench_cluster.py [--rounds 3] [--seconds 5] [--producers 64]
    python bench/bench_cluster.py --failover [--kills 3]
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, deque

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, ROOT)

from threads_profile import sample  # noqa: E402 - the sibling script's /proc reader

from fmq.client import Client, Producer  # noqa: E402
from fmq.errors import FMQError  # noqa: E402
from fmq.protocol import Op  # noqa: E402
from tests.etcdkit import EtcdProcess  # noqa: E402
from tests.server.harness import ServerProcess, run_cli  # noqa: E402

BODY = b"x" * 1024
TOPIC = "bench"
QUEUES = 8
CLIENT_PROCESSES = 4
#: The smallest lease the server takes: a fail-over takes about this long.
TTL_S = 3
SERVER = {"lease_ttl_s": TTL_S, "route_resync_ms": 1000}
THROUGHPUT_CONFIG = {"server": SERVER}
#: ``async``: a group of two left with its new primary alone takes writes (in ``sync`` mode
#: with ``min_insync = 1`` it refuses them, NotEnoughReplicas, until the killed node is back).
FAILOVER_CONFIG = {"ack_mode": "async", "server": SERVER}


def repl_status(node: ServerProcess) -> dict:
    if not node.alive:
        return {"role": "down"}
    try:
        with Client(node.address, retries=0, connect_timeout=2, request_timeout=5) as c:
            return json.loads(c.call(Op.REPL_STATUS, {})["json"])
    except (FMQError, OSError):
        return {"role": "down"}


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


class Cluster:
    """Broker groups g1..gN of ``per_group`` nodes each, in cluster ``name`` of ``etcd``."""

    def __init__(self, work: str, etcd: EtcdProcess, name: str, groups: int, per_group: int,
                 config: dict) -> None:
        self.etcd, self.name = etcd, name
        self.groups = {f"g{g}": [ServerProcess(
            os.path.join(work, f"{name}-g{g}-n{n}"), config, extra_args=(
                "--coordinator", etcd.url, "--cluster-name", name, "--group", f"g{g}",
                "--node", f"g{g}-n{n}")) for n in range(1, per_group + 1)]
            for g in range(1, groups + 1)}

    @property
    def nodes(self) -> list[ServerProcess]:
        return [n for nodes in self.groups.values() for n in nodes]

    @property
    def servers(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def start(self) -> Cluster:
        for node in self.nodes:
            node.start()
        for group in self.groups:
            self.whole(group)
        return self

    def primary(self, group: str) -> ServerProcess | None:
        return next((n for n in self.groups[group] if repl_status(n)["role"] == "primary"),
                    None)

    def whole(self, group: str, timeout: float = 60.0) -> ServerProcess:
        """Wait until ``group`` has one primary with every other node in its in-sync set."""
        found: list[ServerProcess] = []

        def ready() -> bool:
            p = self.primary(group)
            if p is None:
                return False
            want = {n.address for n in self.groups[group] if n is not p}
            found[:] = [p]
            return want <= set(repl_status(p).get("in_sync", ()))
        wait_for(ready, timeout, f"{group} to be whole")
        return found[0]

    def create_topic(self, queues_per_group: int) -> None:
        done = run_cli("topic", "create", TOPIC, "--queues-per-group", str(queues_per_group),
                       "--coordinator", self.etcd.url, "--cluster-name", self.name)
        if done.returncode != 0:
            raise RuntimeError(f"fmq topic create failed: {done.stderr}")
        with Producer(self.servers, request_timeout=30) as p:  # every queue is hosted now
            for index in range(queues_per_group * len(self.groups)):
                p.send(TOPIC, b"warm-up", queue_id=index)

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()


# ---- 1. throughput ----

def _load(servers: str, threads: int, start_at: float, end_at: float, out: mp.Queue) -> None:
    """``threads`` routing producers, one send in flight each, from ``start_at`` to
    ``end_at`` (wall clock): latencies and acknowledgements per group."""
    lat: list[float] = []
    groups: Counter = Counter()
    errors = [0]
    lock = threading.Lock()

    def run() -> None:
        mine, where, failed = [], Counter(), 0
        with Producer(servers, request_timeout=30) as p:
            p.send(TOPIC, b"warm-up")  # reads the route before the clock starts
            while time.time() < start_at:
                time.sleep(0.001)
            while True:
                t0 = time.perf_counter()
                if time.time() >= end_at:
                    break
                try:
                    where[p.send(TOPIC, BODY).group] += 1
                except FMQError:
                    failed += 1
                    continue
                mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)
            groups.update(where)
            errors[0] += failed

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((lat, dict(groups), errors[0]))


def measure(cluster: Cluster, producers: int, seconds: float) -> dict:
    start_at = time.time() + 5.0  # the client processes start and read the route meanwhile
    end_at = start_at + seconds
    out: mp.Queue = mp.Queue()
    per = [producers // CLIENT_PROCESSES + (i < producers % CLIENT_PROCESSES)
           for i in range(CLIENT_PROCESSES)]
    procs = [mp.Process(target=_load, args=(cluster.servers, n, start_at, end_at, out))
             for n in per if n]
    for p in procs:
        p.start()
    servers = {g: nodes[0].proc.pid for g, nodes in cluster.groups.items()}
    time.sleep(max(0.0, start_at - time.time()))
    before = {g: sample(pid) for g, pid in servers.items()}
    time.sleep(max(0.0, end_at - time.time()))
    after = {g: sample(pid) for g, pid in servers.items()}
    lat: list[float] = []
    groups: Counter = Counter()
    errors = 0
    for _ in procs:
        part, where, failed = out.get(timeout=seconds + 120)
        lat.extend(part)
        groups.update(where)
        errors += failed
    for p in procs:
        p.join(60)
    lat.sort()
    cpu = {g: (after[g].user_s + after[g].system_s - before[g].user_s - before[g].system_s)
           / max(groups[g], 1) * 1e6 for g in servers}
    return {"msgs_per_s": len(lat) / seconds, "p99_ms": lat[int(len(lat) * 0.99)] * 1000,
            "errors": errors, "per_group": dict(groups), "cpu_us_per_msg": cpu}


def throughput(work: str, etcd: EtcdProcess, args: argparse.Namespace) -> None:
    rows: dict[int, list[dict]] = {1: [], 2: []}
    for rnd in range(1, args.rounds + 1):
        for groups in ((1, 2) if rnd % 2 else (2, 1)):
            cluster = Cluster(work, etcd, f"bench{rnd}x{groups}", groups, 1,
                              THROUGHPUT_CONFIG)
            try:
                cluster.start().create_topic(QUEUES // groups)
                r = measure(cluster, args.producers, args.seconds)
            finally:
                cluster.kill()
            rows[groups].append(r)
            cpu = ", ".join(f"{g} {us:.0f}" for g, us in r["cpu_us_per_msg"].items())
            print(f"round {rnd}, {groups} group(s): {r['msgs_per_s']:.0f} msgs/s, p99 "
                  f"{r['p99_ms']:.1f} ms, per group {r['per_group']}, server CPU us/msg "
                  f"{cpu}, errors {r['errors']}", flush=True)
    one, two = summary(rows[1]), summary(rows[2])
    print(f"\n{args.producers} producers, 1 KiB, {args.seconds:g} s, medians of "
          f"{args.rounds} rounds (load average {os.getloadavg()[0]:.1f}):")
    print(f"{'set-up':<28}{'msgs/s':>10}{'p99 ms':>9}{'server CPU us/msg':>20}")
    for label, s in (("1 group (8 queues)", one), ("2 groups (4 queues each)", two)):
        print(f"{label:<28}{s['msgs_per_s']:>10.0f}{s['p99_ms']:>9.1f}"
              f"{s['cpu']:>20}")
    print(f"ratio 2 groups / 1 group on this machine: {two['msgs_per_s'] / one['msgs_per_s']:.2f}")
    ceiling = {label: 2e6 / us for label, us in two["cpu_us"].items()}
    print("on machines of their own (2 cores each, the servers' CPU per message the limit): "
          f"1 group {2e6 / one['cpu_us']['g1']:.0f} msgs/s, 2 groups "
          f"{sum(ceiling.values()):.0f} msgs/s, ratio "
          f"{sum(ceiling.values()) / (2e6 / one['cpu_us']['g1']):.2f}")


def summary(rounds: list[dict]) -> dict:
    cpu_us = {g: statistics.median(r["cpu_us_per_msg"][g] for r in rounds)
              for g in rounds[0]["cpu_us_per_msg"]}
    return {"msgs_per_s": statistics.median(r["msgs_per_s"] for r in rounds),
            "p99_ms": statistics.median(r["p99_ms"] for r in rounds), "cpu_us": cpu_us,
            "cpu": " ".join(f"{g} {us:.0f}" for g, us in cpu_us.items())}


# ---- 2. fail-over ----

class Acks:
    """Every acknowledged send: when it began, when it was answered, the group that
    stored it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[float, float, str]] = []
        self.errors = 0
        self.last_error = ""

    def add(self, began: float, group: str) -> None:
        with self.lock:
            self.items.append((began, time.monotonic(), group))

    def of(self, group: str, after: float) -> list[float]:
        """When the sends begun after ``after`` that ``group`` stored were answered (an
        answer the killed primary gave just before dying may be counted after the kill, a
        send begun once it is reaped cannot have been answered by it)."""
        with self.lock:
            return sorted(t for b, t, g in self.items if g == group and b > after)


def failover(work: str, etcd: EtcdProcess, kills: int) -> None:
    cluster = Cluster(work, etcd, "benchfo", 2, 2, FAILOVER_CONFIG)
    acks, stop = Acks(), threading.Event()
    retries = logging.getLogger("fmq.client")
    retries.setLevel(logging.DEBUG)
    retries.addHandler(_Remember())

    def produce(p: Producer) -> None:
        while not stop.is_set():
            try:
                began = time.monotonic()
                acks.add(began, p.send(TOPIC, BODY).group)
            except FMQError as exc:
                acks.errors += 1
                acks.last_error = repr(exc)

    try:
        cluster.start().create_topic(2)
        with Producer(cluster.servers, request_timeout=10) as producer:
            threads = [threading.Thread(target=produce, args=(producer,), daemon=True)
                       for _ in range(4)]
            for t in threads:
                t.start()
            times = [one_kill(cluster, acks, k) for k in range(1, kills + 1)]
            stop.set()
            for t in threads:
                t.join(60)
    finally:
        stop.set()
        cluster.kill()
    print(f"\nkill -9 of g1's primary to the first send stored in g1 again, {kills} kills "
          f"(lease_ttl_s {TTL_S}; load average {os.getloadavg()[0]:.1f}): median "
          f"{statistics.median(times):.2f} s, min {min(times):.2f} s, max {max(times):.2f} s; "
          f"send errors {acks.errors}")


#: The routing producer's last retry messages (the client logs each at DEBUG).
RETRIES: deque = deque(maxlen=8)


class _Remember(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        RETRIES.append(f"{record.created:.2f} {record.getMessage()[:300]}")


def route_primaries(node: ServerProcess) -> dict | str:
    """Each group's primary in the node's ROUTE answer for the topic."""
    if not node.alive:
        return "down"
    try:
        with Client(node.address, retries=0, request_timeout=5) as c:
            answer = json.loads(c.call(Op.ROUTE, {"topic": TOPIC})["json"])
    except (FMQError, OSError) as exc:
        return repr(exc)
    return {g["group"]: g["primary"] for g in answer["groups"]}


def one_kill(cluster: Cluster, acks: Acks, k: int) -> float:
    for group in cluster.groups:
        cluster.whole(group)
    time.sleep(1.0)  # the producer is writing to both primaries
    victim = cluster.primary("g1")
    kill_sent = time.monotonic()
    victim.kill()  # returns once the process is reaped
    killed_at = time.monotonic()
    try:
        wait_for(lambda: acks.of("g1", killed_at), 60, "a send stored in g1 after the kill")
    except RuntimeError:
        faulthandler.dump_traceback(all_threads=True)  # where the producer's threads wait
        roles = {n.address: repl_status(n).get("role") for n in cluster.groups["g1"]}
        for node in cluster.nodes:
            print(f"ROUTE at {node.address}: {route_primaries(node)}", file=sys.stderr)
        print("the producer's last retries:", *RETRIES, sep="\n  ", file=sys.stderr)
        raise RuntimeError(f"no send stored in g1 within 60 s of the kill: g1's nodes "
                           f"{roles}, g2 acknowledged {len(acks.of('g2', killed_at))}, "
                           f"send errors {acks.errors}, last {acks.last_error}") from None
    back = acks.of("g1", killed_at)[0]
    g2 = [t for t in acks.of("g2", killed_at) if t <= back]
    gap = max((b - a for a, b in zip([killed_at, *g2], [*g2, back], strict=True)), default=0)
    heir = next(n for n in cluster.groups["g1"] if n is not victim)
    print(f"kill {k}: first send stored in g1 after {back - kill_sent:.2f} s (new primary "
          f"{heir.address}); meanwhile g2 acknowledged {len(g2)} sends, "
          f"longest gap {gap:.2f} s", flush=True)
    victim.start()  # it rejoins g1 as a follower
    return back - kill_sent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--producers", type=int, default=64)
    ap.add_argument("--failover", action="store_true", help="measure the route refresh "
                    "after a primary's SIGKILL instead of the throughput")
    ap.add_argument("--kills", type=int, default=3)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="fmq-bench-cluster-")
    etcd = EtcdProcess(os.path.join(work, "etcd")).start()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    try:
        if args.failover:
            failover(work, etcd, args.kills)
        else:
            throughput(work, etcd, args)
    finally:
        etcd.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
