"""Server instructions per message under compare.py row 6's kind of load, counted by
``valgrind --tool=callgrind``: producers sending while 16 ``fmq bench consume --follow``
consumers read the topic (four per queue), and the same producers without consumers; the
difference is what the consumers cost the server per message sent. For this checkout and
``--old``, one after the other.

Per checkout and load, an ``fmq server`` (flush_mode sync) runs under callgrind with the
instrumentation off; the loads start (the consumers first, then the producers), and once
messages flow the instrumentation is turned on for ``--seconds`` (every thread of the
server), with STATS read at both ends: the messages sent in the window (the topic's next
offsets), the PULL requests, the PULL reads (a woken long poll reads again) and the
wake-ups. A server under callgrind is some fifty times slower, so fewer producers than row
6's 64 may keep its index batches, and so the messages a woken PULL finds, nearer row 6's
on a free machine; each line prints that shape beside the counts. The shape moves with the
load of the machine (the server's speed under callgrind against the clients'), and the
counts per message with it: two runs say something only where their shapes are alike.
``read_request_instructions.py --only follow`` counts the same cycle steadily, scripted.
Not part of the test run::

    python bench/follow_instructions.py [--old PATH_OF_AN_OLDER_CHECKOUT]
        [--producers 8] [--consumers 16] [--seconds 20] [--keep DIR]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._callgrind import collected, collecting, stop  # noqa: E402
from bench.ab_rounds import fmq_command, parser, trees  # noqa: E402
from bench.bench_network import free_port  # noqa: E402
from fmq.client import Client  # noqa: E402
from fmq.loadgen import BenchSpec, run_bench  # noqa: E402
from fmq.protocol import Op  # noqa: E402

TOPIC = "fmq-follow-instr"
#: Queues of a topic on a server of default settings: each consumer follows one of them.
QUEUES = 4
#: Seconds a server under callgrind is given to start and to settle under its load.
START_S = 120.0
SETTLE_S = 3.0


def _stats(client: Client) -> dict:
    return json.loads(client.call(Op.STATS, {})["json"])["server"]


def _sent(client: Client) -> int:
    queues = client.ping()["queues_per_topic"]
    return sum(client.call(Op.QUEUE_RANGE, {"topic": TOPIC, "queue_id": q})["next_offset"]
               for q in range(queues))


def _wait_up(port: int) -> Client:
    deadline = time.monotonic() + START_S
    while True:
        try:
            client = Client(f"127.0.0.1:{port}", request_timeout=120.0)
            client.ping()
            return client
        except Exception:  # noqa: BLE001 - not listening yet (valgrind starts slowly)
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def measure(tree: str, producers: int, consumers: int, seconds: float, scratch: str,
            keep: str | None, name: str) -> dict:
    """Instructions and the load's shape in a window of ``seconds`` of a server of ``tree``."""
    port = free_port()
    out = os.path.join(scratch, "callgrind.out")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no",
         f"--callgrind-out-file={out}", *fmq_command(tree), "server", "--data-dir",
         os.path.join(scratch, "data"), "--port", str(port), "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=tree), cwd=tree)
    reports: dict = {}
    threads = []
    address = f"127.0.0.1:{port}"
    try:
        client = _wait_up(port)
        run_for = seconds + SETTLE_S + 20.0
        if consumers:
            follow = BenchSpec(kind="consume", server=address, producers=consumers,
                               follow=True, topic=TOPIC, duration_s=run_for + 10.0)
            threads.append(threading.Thread(
                target=lambda: reports.setdefault("consume", run_bench(follow))))
            threads[-1].start()
            time.sleep(10.0)  # the consumer processes connect (a slow server)
        load = BenchSpec(kind="produce", server=address, producers=producers, size=1024,
                         duration_s=run_for, topic=TOPIC)
        threads.append(threading.Thread(
            target=lambda: reports.setdefault("produce", run_bench(load))))
        threads[-1].start()
        deadline = time.monotonic() + START_S
        while _sent(client) == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(SETTLE_S)
        s0, n0 = _stats(client), _sent(client)
        with collecting(proc.pid):
            time.sleep(seconds)
        s1, n1 = _stats(client), _sent(client)
        for t in threads:
            t.join(run_for + 120.0)
        client.close()
    finally:
        err = stop(proc)
    instructions = collected(err)
    for kind, report in reports.items():
        if not report.count_check.startswith("ok") or report.errors:
            raise SystemExit(f"{kind} failed: {report.count_check}, {report.errors}")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(out, os.path.join(keep, f"callgrind.{name}.{consumers}"))
    sent = n1 - n0
    pulls = (s1["requests_by_op"].get("PULL", 0) - s0["requests_by_op"].get("PULL", 0))
    return {"instructions": instructions, "sent": sent,
            "pulls": pulls, "reads": s1["pull_reads"] - s0["pull_reads"],
            "wakeups": s1["pull_wakeups"] - s0["pull_wakeups"],
            "reads_per_message": max(1, consumers // QUEUES)}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--consumers", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=20.0, help="the counted window")
    ap.add_argument("--keep", default=None, help="a directory to keep the callgrind files in")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    for name, tree in trees(args.old).items():
        row = {}
        for consumers in (args.consumers, 0):
            with tempfile.TemporaryDirectory(prefix="fmq-follow-instr-") as tmp:
                row[consumers] = measure(tree, args.producers, consumers, args.seconds,
                                         tmp, args.keep, name)
        with_c, alone = row[args.consumers], row[0]
        per_with = with_c["instructions"] / with_c["sent"]
        per_alone = alone["instructions"] / alone["sent"]
        sent = with_c["sent"]
        print(f"{name}: per message sent, {per_with:,.0f} instructions with "
              f"{args.consumers} consumers following, {per_alone:,.0f} without, "
              f"{per_with - per_alone:,.0f} the consumers' "
              f"({(per_with - per_alone) / with_c['reads_per_message']:,.0f} per message "
              f"consumed); shape with consumers: {with_c['sent'] / args.seconds:,.0f} sent/s, "
              f"{with_c['pulls'] / sent:.3f} PULLs, {with_c['reads'] / sent:.3f} reads, "
              f"{with_c['wakeups'] / sent:.3f} wake-ups per message sent; without: "
              f"{alone['sent'] / args.seconds:,.0f} sent/s", flush=True)


if __name__ == "__main__":
    main()
