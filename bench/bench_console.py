"""Send rate with the console open and refreshing, against the same server without.

One ``fmq server --console-port`` on loopback; rounds alternate "quiet" (nobody on the
console) and "browsing" (a reader fetches the overview, topics, groups, transactions and a
page of messages back to back, as fast as the console answers: far more than a person
refreshing; ``--pace S`` waits S seconds between pages instead). Each round is ``fmq bench produce`` for ``--duration`` seconds; the script
prints each round's msgs/s and the medians (docs/performance.md, *The console*).

    python bench/bench_console.py --rounds 3 --duration 8 [--pace 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

PAGES = ("/", "/cluster", "/topics", "/topics/fmq-bench", "/groups", "/transactions",
         "/messages?topic=fmq-bench&queue=0&offset=0")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not answer within {timeout:g} s")


class Browsing(threading.Thread):
    """Fetches the console's pages back to back until stopped; counts pages."""

    def __init__(self, base: str, pace: float) -> None:
        super().__init__(daemon=True)
        self.base, self.pace, self.pages, self.done = base, pace, 0, threading.Event()
        self.started = self.seconds = 0.0

    def run(self) -> None:
        self.started = time.monotonic()
        try:
            self._browse()
        finally:
            self.seconds = time.monotonic() - self.started

    def _browse(self) -> None:
        while not self.done.is_set():
            for page in PAGES:
                urllib.request.urlopen(self.base + page, timeout=30).read()
                self.pages += 1
                if self.done.wait(self.pace):
                    return


def produce(address: str, duration: float, producers: int) -> float:
    out = subprocess.run([sys.executable, "-m", "fmq.cli.main", "bench", "produce",
                          "--server", address, "--duration", str(duration),
                          "-c", str(producers), "--size", "512", "--json"],
                         capture_output=True, text=True, timeout=duration + 120, check=True)
    return json.loads(out.stdout)["msgs_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--producers", type=int, default=16)
    ap.add_argument("--pace", type=float, default=0.0,
                    help="seconds between two page fetches (0: back to back)")
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="fmq-bench-console-")
    port, console = free_port(), free_port()
    server = subprocess.Popen([sys.executable, "-m", "fmq.cli.main", "server", "--data-dir",
                               os.path.join(scratch, "data"), "--port", str(port),
                               "--console-port", str(console), "--log-level", "warning"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base, address = f"http://127.0.0.1:{console}", f"127.0.0.1:{port}"
    results: dict[str, list[float]] = {"quiet": [], "browsing": []}
    try:
        wait_for(base + "/topics")
        produce(address, 2, args.producers)  # warm-up: the topic exists, pages have data
        for r in range(args.rounds):
            order = ("quiet", "browsing") if r % 2 == 0 else ("browsing", "quiet")
            for side in order:
                browsing = Browsing(base, args.pace) if side == "browsing" else None
                if browsing:
                    browsing.start()
                rate = produce(address, args.duration, args.producers)
                pages = ""
                if browsing:
                    browsing.done.set()
                    browsing.join(60)
                    pages = f" ({browsing.pages / browsing.seconds:.0f} pages/s)"
                results[side].append(rate)
                print(f"round {r + 1} {side:9} {rate:10,.0f} msg/s{pages}", flush=True)
        quiet, busy = (statistics.median(results[s]) for s in ("quiet", "browsing"))
        print(f"median quiet {quiet:,.0f} msg/s, browsing {busy:,.0f} msg/s "
              f"({(busy - quiet) / quiet:+.1%})")
    finally:
        server.terminate()
        server.wait(60)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
