"""Consumer-offset commits over the network: COMMIT_OFFSET calls/s and p50/p99 latency against
a real ``fmq server`` subprocess on 127.0.0.1 (flush_mode sync), with 1 and 16 committing
connections, and 16 committing while 16 producers send (commits share the sends' group
commit).

Since consumer offsets are OFFSET log records (issue 12), a commit is answered after its
record is fdatasync'd and indexed; before, it was an LMDB write without fsync. Run the same
script on both to compare (``PYTHONPATH=OLD_TREE`` runs an older checkout's client and
server)::

    python bench/bench_commit_offset.py [--seconds 5] [--data-dir DIR]

Not part of the test run (pytest's testpaths is tests/).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_network import free_port, start_server  # noqa: E402

QUEUES = 4
PER_QUEUE = 200


def _run(address: str, committers: int, senders: int, seconds: float) -> dict:
    from fmq.client import Client, Producer
    from fmq.protocol import Op

    lat: list[float] = []
    sent = [0]
    lock = threading.Lock()
    start_at = time.time() + 0.5
    end = start_at + seconds

    def commit(i: int) -> None:
        mine = []
        with Client(address) as c:
            c.ping()
            while time.time() < start_at:
                time.sleep(0.001)
            n = 0
            while time.time() < end:
                t0 = time.perf_counter()
                c.call(Op.COMMIT_OFFSET, {"group": f"bench-{i}", "topic": "bench",
                                          "queue_id": n % QUEUES,
                                          "next_offset": n % PER_QUEUE})
                mine.append(time.perf_counter() - t0)
                n += 1
        with lock:
            lat.extend(mine)

    def send() -> None:
        with Producer(address) as p:
            p.ping()
            while time.time() < start_at:
                time.sleep(0.001)
            n = 0
            while time.time() < end:
                p.send("load", b"x" * 1024)
                n += 1
        with lock:
            sent[0] += n

    threads = ([threading.Thread(target=commit, args=(i,)) for i in range(committers)]
               + [threading.Thread(target=send) for _ in range(senders)])
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat.sort()
    return {"committers": committers, "senders": senders,
            "commits_per_s": round(len(lat) / seconds),
            "p50_ms": round(statistics.median(lat) * 1000, 2),
            "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 2),
            "sends_per_s": round(sent[0] / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--data-dir", default=None, help="parent of the server's data dir")
    args = parser.parse_args()
    import fmq
    from fmq.client import Producer

    work = tempfile.mkdtemp(prefix="fmq-bench-offsets-", dir=args.data_dir)
    port = free_port()
    server = start_server(os.path.join(work, "data"), port)
    address = f"127.0.0.1:{port}"
    try:
        with Producer(address) as p:
            for q in range(QUEUES):
                for _ in range(PER_QUEUE):
                    p.send_message(fmq.Message("bench", b"m" * 100, queue_id=q))
        print(f"fmq {fmq.__file__}")
        for committers, senders in ((1, 0), (16, 0), (16, 16)):
            r = _run(address, committers, senders, args.seconds)
            print(f"{r['committers']:>3} committers {r['senders']:>3} senders: "
                  f"{r['commits_per_s']:>7} commits/s  p50 {r['p50_ms']:>6} ms  "
                  f"p99 {r['p99_ms']:>6} ms  sends/s {r['sends_per_s']}")
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
