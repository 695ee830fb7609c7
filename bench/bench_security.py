"""Durable sends/s with TLS + SCRAM next to plaintext, in one run (docs/security.md).

Two real ``fmq server`` subprocesses on 127.0.0.1, each on its own data directory, every
acknowledgement after fdatasync: one plaintext without users, one with TLS on the port
(certificates made by trustme), a user who logs in with SCRAM-SHA-256 and an access rule
allowing it to produce (so every request passes the authorisation check). 64 producers,
each a thread with its own ``fmq.client.Producer`` (its own connection, one log-in each),
spread over 4 client processes, send 1 KiB bodies; the rounds alternate between the two
servers and the medians are reported, with the ratio.

Not part of the test run (pytest's testpaths is tests/). Needs trustme (the test extra)::

    python bench/bench_security.py [--seconds 5] [--rounds 3] [--producers 64]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_network import free_port  # noqa: E402

BODY = b"x" * 1024
PASSWORD = "bench password"  # noqa: S105 - a throw-away user of a temporary directory
FMQ = [sys.executable, "-m", "fmq.cli.main"]


def start_server(data_dir: str, port: int, extra: list[str], options: dict
                 ) -> subprocess.Popen:
    from fmq.client import Client
    from fmq.errors import FMQError

    log = open(data_dir + ".log", "a")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen([*FMQ, "server", "--data-dir", data_dir, "--port", str(port),
                             "--log-level", "WARNING", *extra], stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with Client(f"127.0.0.1:{port}", retries=0, connect_timeout=0.5,
                        **options) as c:
                c.ping()
            return proc
        except FMQError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"server did not start; see {data_dir}.log")


def _worker(address: str, options: dict, threads: int, seconds: float, start_at: float,
            out: mp.Queue) -> None:
    from fmq.client import Producer

    lat: list[float] = []
    lock = threading.Lock()

    def run() -> None:
        mine = []
        with Producer(address, **options) as p:
            p.send("bench", b"warm-up")  # connected and logged in before the clock
            while time.time() < start_at:
                time.sleep(0.001)
            end = start_at + seconds
            while True:
                t0 = time.perf_counter()
                if time.time() >= end:
                    break
                p.send("bench", BODY)
                mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put(lat)


def measure(address: str, options: dict, producers: int, seconds: float) -> dict:
    procs = min(producers, 4)
    per = [producers // procs + (1 if i < producers % procs else 0) for i in range(procs)]
    out: mp.Queue = mp.Queue()
    start_at = time.time() + 2.0 + 0.03 * producers
    ps = [mp.Process(target=_worker, args=(address, options, n, seconds, start_at, out))
          for n in per]
    for p in ps:
        p.start()
    lat: list[float] = []
    for _ in ps:
        lat.extend(out.get(timeout=seconds + 180))
    for p in ps:
        p.join()
    lat.sort()
    q = statistics.quantiles(lat, n=100, method="inclusive")
    return {"sends_per_s": len(lat) / seconds, "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000}


def make_certificate(base: str) -> tuple[list[str], dict]:
    """A CA and a certificate for 127.0.0.1: the server's options and the clients'."""
    import trustme

    from fmq.client import TLSOptions

    ca = trustme.CA()
    ca_file, cert_file = os.path.join(base, "ca.pem"), os.path.join(base, "server.pem")
    ca.cert_pem.write_to_path(ca_file)
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(cert_file)
    return ["--tls-cert", cert_file], {"tls": TLSOptions(ca_file=ca_file)}


def with_user(data: str) -> dict:
    """User "bench" in ``data``, allowed to produce to topic "bench": the clients' options."""
    env = {**os.environ, "FMQ_NEW_PASSWORD": PASSWORD}
    subprocess.run([sys.executable, "-c", f"import fmq; fmq.Broker.open({data!r}).close()"],
                   check=True)
    subprocess.run([*FMQ, "user", "add", "bench", data], env=env, check=True,
                   capture_output=True)
    subprocess.run([*FMQ, "acl", "add", data, "--principal", "bench", "--operation",
                    "produce", "--topic", "bench"], check=True, capture_output=True)
    return {"user": "bench", "password": PASSWORD}


MODES = ("plaintext", "TLS", "SCRAM", "TLS + SCRAM")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--producers", type=int, default=64)
    ap.add_argument("--all", action="store_true",
                    help="Also TLS alone and SCRAM alone, to see which costs what.")
    args = ap.parse_args()
    modes = MODES if args.all else ("plaintext", "TLS + SCRAM")
    with tempfile.TemporaryDirectory(prefix="fmq-bench-sec-") as base:
        tls_args, tls_options = make_certificate(base)
        servers: dict[str, tuple[subprocess.Popen, str, dict]] = {}
        try:
            for mode in modes:
                data, port = os.path.join(base, f"data-{len(servers)}"), free_port()
                options = dict(tls_options) if "TLS" in mode else {}
                if "SCRAM" in mode:
                    options.update(with_user(data))
                proc = start_server(data, port, tls_args if "TLS" in mode else [], options)
                servers[mode] = (proc, f"127.0.0.1:{port}", options)
            runs: dict[str, list[dict]] = {mode: [] for mode in modes}
            for r in range(args.rounds):
                for mode, (_, address, options) in servers.items():
                    m = measure(address, options, args.producers, args.seconds)
                    runs[mode].append(m)
                    print(f"round {r + 1} {mode:<12} {m['sends_per_s']:8.0f} sends/s  "
                          f"p50 {m['p50_ms']:6.2f} ms  p99 {m['p99_ms']:6.2f} ms", flush=True)
        finally:
            for proc, _, _ in servers.values():
                proc.terminate()
                proc.wait(30)
    print(f"\n{args.producers} producers, 1 KiB durable sends, {args.rounds} rounds of "
          f"{args.seconds:g} s each (medians):")
    base_rate = None
    for mode, ms in runs.items():
        m = {k: statistics.median(x[k] for x in ms) for k in ms[0]}
        base_rate = base_rate or m["sends_per_s"]
        print(f"  {mode:<12} {m['sends_per_s']:8.0f} sends/s  p50 {m['p50_ms']:6.2f} ms  "
              f"p99 {m['p99_ms']:6.2f} ms  ({m['sends_per_s'] / base_rate:.2f} of plaintext)")


if __name__ == "__main__":
    main()
