"""How much of the server's CPU per durable SEND the event loop could save at best: the same
load against ``fmq server`` and against two floor servers that store nothing, side by side.

The floors run the request path's unavoidable part in this interpreter on uvloop, as the
server does: ``split`` reads the socket, splits frames with FMQ's compiled frame splitter
and writes a pre-encoded SEND answer with the request's id; ``codec`` also decodes each
SEND request and encodes its answer with FMQ's protocol codec. Neither places, stores nor
fsyncs anything. The load is one process of ``--connections`` connections (uvloop), each
with one SEND of 1 KiB in flight, for ``--seconds``; each round runs every server in turn
(alternating the order) and reads the server's user and system CPU from ``/proc``. Run::

    python bench/bench_send_floor.py [--rounds 3] [--seconds 5] [--connections 64]

Not part of the test run. What it answers: the floor is what Python and uvloop cost per
request with no FMQ logic at all; FMQ's CPU per message minus the floor is what a compiled
request path could remove at most.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.ab_rounds import killed_at_end, process_cpu_seconds, scratch  # noqa: E402
from bench.bench_network import free_port, start_server  # noqa: E402
from fmq.loadgen.frames import send_template  # noqa: E402

FLOOR = r"""
import asyncio, struct, sys, uvloop
from fmq.protocol import FrameDecoder, Op, decode_request, encode_response

mode, port = sys.argv[1], int(sys.argv[2])
RESULT = {"result": {"offset": 123456789, "queue_id": 3, "queue_offset": 98765}}
CANNED = encode_response(Op.SEND, 0, RESULT)
HEAD, TAIL = CANNED[:8], CANNED[16:]
RID = struct.Struct(">Q")

class Floor(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.decoder = FrameDecoder()

    def data_received(self, data):
        for frame in self.decoder.feed(data):
            if mode == "codec":
                decode_request(frame)
                self.transport.write(encode_response(Op.SEND, frame.request_id, RESULT))
            else:
                self.transport.write(HEAD + RID.pack(frame.request_id) + TAIL)

async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Floor, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    await server.serve_forever()

uvloop.run(main())
"""

LOAD = r"""
import asyncio, struct, sys, time, uvloop
from fmq.loadgen.frames import send_template

port, connections, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
template = send_template("floor", 1024)
done = 0

async def one(stop_at):
    global done
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    rid = 1
    while time.monotonic() < stop_at:
        writer.write(template.with_id(rid))
        head = await reader.readexactly(4)
        await reader.readexactly(struct.unpack(">I", head)[0])
        rid += 1
        done += 1
    writer.close()

async def main():
    stop_at = time.monotonic() + seconds
    await asyncio.gather(*(one(stop_at) for _ in range(connections)))

uvloop.run(main())
print(done)
"""


def start(kind: str, port: int, data_dir: str) -> subprocess.Popen:
    if kind == "fmq":
        return start_server(os.path.join(data_dir, "data"), port)
    proc = subprocess.Popen([sys.executable, "-c", FLOOR, kind, str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if "ready" not in proc.stdout.readline():  # the floor prints it once it listens
        proc.kill()
        raise SystemExit(f"{kind} server did not start: {proc.stdout.read()[-2000:]}")
    return proc


def measure(kind: str, connections: int, seconds: float) -> dict:
    port = free_port()
    with scratch("fmq-floor-") as data_dir, \
            killed_at_end(start(kind, port, data_dir)) as server:
        # The server's CPU over the load's run, its start-up excluded.
        before = process_cpu_seconds(server.pid)
        load = subprocess.run([sys.executable, "-c", LOAD, str(port), str(connections),
                               str(seconds)], capture_output=True, text=True, check=True)
        cpu = process_cpu_seconds(server.pid) - before
    if server.stdout:  # a floor's pipe (fmq's server logs to a file)
        server.stdout.close()
    messages = int(load.stdout.split()[-1])
    return {"msgs_s": messages / seconds, "cpu_us": cpu / messages * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=64)
    args = ap.parse_args()
    send_template("floor", 1024)  # fails here, not in a child, if the protocol changed
    kinds = ["fmq", "codec", "split"]
    results: dict[str, list[dict]] = {k: [] for k in kinds}
    for n in range(args.rounds):
        for kind in kinds if n % 2 == 0 else kinds[::-1]:
            r = measure(kind, args.connections, args.seconds)
            results[kind].append(r)
            print(f"round {n + 1} {kind}: {r['msgs_s']:,.0f} msgs/s, server CPU "
                  f"{r['cpu_us']:.1f} us/msg", flush=True)
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
          f"{os.getloadavg()[0]:.1f}, {args.connections} connections, medians of "
          f"{args.rounds} rounds of {args.seconds:g} s")
    print("| server | msgs/s | server CPU us/msg |\n|---|---:|---:|")
    for kind in kinds:
        rs = results[kind]
        print(f"| {kind} | {statistics.median(r['msgs_s'] for r in rs):,.0f} | "
              f"{statistics.median(r['cpu_us'] for r in rs):.1f} |")


if __name__ == "__main__":
    main()
