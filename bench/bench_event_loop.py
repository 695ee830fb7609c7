"""Event-loop stalls from single requests: what one hostile or careless client costs the
others. A real ``fmq server`` subprocess on 127.0.0.1; every scenario prints what it saw.

* ``join``: one GROUP_JOIN listing ``--topics`` topics while another connection PINGs
  every 10 ms: how long the join took (or the error it got) and the slowest PING;
* ``batch``: one SEND_BATCH of ``--messages`` empty messages, the same PING probe, and the
  server's memory high-water mark (VmHWM) growth;
* ``heartbeat``: ``--groups`` groups joined over ``--group-connections`` connections, then
  a consumer's heartbeat p50/p99 over 300 heartbeats, and the server's memory growth;
* ``pulls``: ``--pulls`` idle long-poll PULLs (``wait_ms`` 30 s) over 16 connections, a
  thread committing transactions, and one producer's SEND p50/p99 for ``--seconds``.

Not part of the test run. Run::

    python -m bench.bench_event_loop join --topics 1000
    python -m bench.bench_event_loop batch --messages 10000
    python -m bench.bench_event_loop heartbeat --groups 10000 --group-connections 100
    python -m bench.bench_event_loop pulls --pulls 4000 --seconds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time

from fmq.client import Client, Producer
from fmq.errors import FMQError
from fmq.protocol import Op
from tests.server.harness import ServerProcess


def vm_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class PingProbe:
    """PINGs every 10 ms on its own connection; remembers the slowest answer."""

    def __init__(self, address: str) -> None:
        self.client = Client(address, request_timeout=300, retries=0)
        self.client.ping()
        self.worst = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            self.client.ping()
            self.worst = max(self.worst, time.perf_counter() - t)
            time.sleep(0.01)

    def finish(self) -> float:
        time.sleep(0.05)
        self.stop.set()
        self.thread.join(300)
        self.client.close()
        return self.worst


def timed(fn) -> tuple[float, str]:
    t = time.perf_counter()
    try:
        fn()
        what = "ok"
    except FMQError as exc:
        what = f"{type(exc).__name__}: {str(exc)[:100]}"
    return time.perf_counter() - t, what


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def bench_join(srv: ServerProcess, args) -> None:
    topics = [f"t{i}" for i in range(args.topics)]
    probe = PingProbe(srv.address)
    with Client(srv.address, request_timeout=300, retries=0) as c:
        took, what = timed(lambda: c.call(Op.GROUP_JOIN, {"group": "g", "member_id": None,
                                                          "topics": topics}))
    print(f"GROUP_JOIN of {args.topics} topics: {took:.3f} s ({what}); "
          f"slowest concurrent PING {probe.finish() * 1000:.1f} ms")


def bench_batch(srv: ServerProcess, args) -> None:
    msg = {"topic": "b", "body": b"", "key": None, "tags": None, "properties": {},
           "queue_id": -1}
    pid = srv.proc.pid
    rss0 = vm_kib(pid, "VmRSS")
    probe = PingProbe(srv.address)
    with Client(srv.address, request_timeout=300, retries=0) as c:
        took, what = timed(lambda: c.call(Op.SEND_BATCH, {"messages": [msg] * args.messages}))
    print(f"SEND_BATCH of {args.messages} empty messages: {took:.3f} s ({what}); "
          f"slowest concurrent PING {probe.finish() * 1000:.1f} ms; server peak memory "
          f"+{(vm_kib(pid, 'VmHWM') - rss0) / 1024:.0f} MiB")


def bench_heartbeat(srv: ServerProcess, args) -> None:
    pid = srv.proc.pid
    rss0 = vm_kib(pid, "VmRSS")
    per = args.groups // args.group_connections
    clients = [Client(srv.address, request_timeout=300, retries=0)
               for _ in range(args.group_connections)]
    refused = 0
    for ci, c in enumerate(clients):
        futs = []
        for i in range(per):
            futs.append(c.submit(Op.GROUP_JOIN, {"group": f"g{ci}-{i}", "member_id": None,
                                                 "topics": ["t"]}))
            if len(futs) >= 100:
                for f in futs:
                    try:
                        f.result(300)
                    except FMQError:
                        refused += 1
                futs = []
        for f in futs:
            try:
                f.result(300)
            except FMQError:
                refused += 1
    lat = []
    with Client(srv.address, request_timeout=60, retries=0) as c:
        mid = c.call(Op.GROUP_JOIN, {"group": "probe", "member_id": None,
                                     "topics": ["t"]})["member_id"]
        for _ in range(300):
            t = time.perf_counter()
            c.call(Op.GROUP_HEARTBEAT, {"group": "probe", "member_id": mid, "topics": ["t"]})
            lat.append(time.perf_counter() - t)
            time.sleep(0.005)
    print(f"{args.groups} groups over {args.group_connections} connections ({refused} "
          f"refused): heartbeat p50 {pct(lat, 0.5) * 1000:.2f} ms p99 "
          f"{pct(lat, 0.99) * 1000:.2f} ms; server memory "
          f"+{(vm_kib(pid, 'VmHWM') - rss0) / 1024:.0f} MiB")
    for c in clients:
        c.close()


def bench_pulls(srv: ServerProcess, args) -> None:
    conns = [Client(srv.address, request_timeout=120, retries=0, max_in_flight=256)
             for _ in range(16)]
    pulls = []
    for i in range(args.pulls):
        c = conns[i % len(conns)]
        pulls.append(c.submit(Op.PULL, {"topic": f"idle{i // 4}", "queue_id": i % 4,
                                        "offset": 0, "max_messages": 32, "wait_ms": 30_000}))
    time.sleep(1.0)
    stop = threading.Event()
    commits = [0]

    def committer() -> None:
        with Client(srv.address, request_timeout=60, retries=0) as c:
            while not stop.is_set():
                tx = c.call(Op.PREPARE, {"producer_group": "pg", "tx_id": None, "messages": [
                    {"topic": "busy", "body": b"x", "key": None, "tags": None,
                     "properties": {}, "queue_id": -1}]})["tx_id"]
                c.call(Op.COMMIT, {"producer_group": "pg", "tx_id": tx})
                commits[0] += 1
                c.call(Op.COMMIT_OFFSET, {"group": "cg", "topic": "busy", "queue_id": 0,
                                          "next_offset": commits[0]})

    th = threading.Thread(target=committer, daemon=True)
    th.start()
    lat = []
    with Producer(srv.address, request_timeout=60, retries=0) as p:
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            t = time.perf_counter()
            p.send("plain", b"y" * 100)
            lat.append(time.perf_counter() - t)
    stop.set()
    th.join(60)
    still = sum(1 for f in pulls if not f.done())
    print(f"{args.pulls} idle pulls ({still} still waiting), {commits[0]} commits in "
          f"{args.seconds} s: {len(lat)} sends, p50 {pct(lat, 0.5) * 1000:.2f} ms p99 "
          f"{pct(lat, 0.99) * 1000:.2f} ms mean {statistics.mean(lat) * 1000:.2f} ms")
    for c in conns:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", choices=["join", "batch", "heartbeat", "pulls"])
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--group-connections", type=int, default=100)
    ap.add_argument("--pulls", type=int, default=4000)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fmq-bench-loop-") as tmp:
        srv = ServerProcess(os.path.join(tmp, "data"), {"checkpoint_interval_ms": 0})
        srv.start()
        try:
            {"join": bench_join, "batch": bench_batch, "heartbeat": bench_heartbeat,
             "pulls": bench_pulls}[args.scenario](srv, args)
        finally:
            srv.kill()


if __name__ == "__main__":
    main()
