"""The per-message work the compiled twins replace, in one process, without I/O: what a
durable SEND costs the server in the modules fmq.native chooses, compiled or pure.

One message: its SEND frame (1 KiB body, key, tags, a property) split off a byte stream by
``FrameDecoder`` and decoded, the MESSAGE record encoded with its CRC into a group-commit
style buffer, the SEND answer encoded, and the record decoded again as the redo scanner
does. With ``--place``, each message is also checked and placed as the server places a
SEND (``check_messages``, ``place_messages`` into a real log in a temporary directory, whose
group commit flushes it in the background) and the decoded record's index entries derived
and filed as the dispatcher does (``index_items``, ``sort_items``). ``--messages`` of them; with ``--callgrind`` the script runs itself under valgrind's
callgrind twice (0 and N messages) for each path and prints machine instructions per
message, which the shared machine's load does not change; without it, the best of
``--rounds`` timings in microseconds per message.

    python bench/bench_native_path.py --callgrind --messages 3000
    python bench/bench_native_path.py --callgrind --messages 3000 --place
    python bench/bench_native_path.py --rounds 7 --messages 20000
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time


def run(messages: int, place: bool = False) -> float:
    if not place:
        return _run(messages, None)
    from fmq.config import BrokerConfig
    from fmq.engine.queues import Queues
    from fmq.log.log import Log

    with tempfile.TemporaryDirectory(prefix="fmq-native-path-") as directory:
        log_ = Log(directory, 256 * 1024 * 1024)
        log_.start_at(0)
        try:
            return _run(messages, (log_, Queues(8, {}), BrokerConfig()))
        finally:
            log_.close()


def _run(messages: int, placing: tuple | None) -> float:
    from fmq.engine.queues import check_messages, place_messages
    from fmq.index.entries import index_items, sort_items
    from fmq.log import record as R
    from fmq.protocol import FrameDecoder, Op, decode_request, encode_request, encode_response
    from fmq.protocol.values import message_from_wire

    wire = {"topic": "orders", "body": b"x" * 1024, "key": "order-1", "tags": "paid",
            "properties": {"trace": "abc"}, "queue_id": 3}
    frame = encode_request(Op.SEND, 7, {"message": wire})
    stream = frame * 16  # frames arrive several to a read
    decoder = FrameDecoder()
    buf = bytearray()
    start = time.perf_counter()
    done = 0
    while done < messages:
        for f in decoder.feed(stream):
            if done == messages:
                break
            m = decode_request(f)["message"]
            rec = R.Record(R.RecordType.MESSAGE, log_offset=len(buf), store_time=1,
                           queue_id=m["queue_id"], queue_offset=done, topic=m["topic"],
                           key=m["key"], tags=m["tags"], properties=m["properties"],
                           body=m["body"])
            at = len(buf)
            R.encode_into(buf, at, rec)
            encode_response(Op.SEND, f.request_id,
                            {"result": {"offset": at, "queue_id": 3, "queue_offset": done}})
            decoded = R.decode_at(buf, at, at, R.FORMAT_MAX_RECORD, False)
            if placing is not None:
                log_, queues, config = placing
                batch = [message_from_wire(m)]
                check_messages(batch, config, queues)
                place_messages(log_, queues, batch)
                sort_items(index_items(decoded), [], [], [])
            decoded = None  # its body is a view of buf, which the next encode grows
            done += 1
        if len(buf) > 1 << 22:
            buf.clear()
    return time.perf_counter() - start


def _instructions(messages: int, env: dict, place: bool) -> int:
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           sys.executable, __file__, "--messages", str(messages), "--child",
                           *(["--place"] if place else [])],
                          env=env, capture_output=True, text=True, check=True)
    return int(re.search(r"Collected : (\d+)", done.stderr).group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--place", action="store_true",
                    help="also check and place each message and derive its index entries")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run(args.messages, args.place)
        return
    base = {k: v for k, v in os.environ.items() if k != "FMQ_NO_EXTENSIONS"}
    paths = {"compiled": base, "pure": {**base, "FMQ_NO_EXTENSIONS": "1"}}
    if args.callgrind:
        per = {}
        for name, env in paths.items():
            per[name] = (_instructions(args.messages, env, args.place)
                         - _instructions(0, env, args.place)) / args.messages
            print(f"{name}: {per[name]:,.0f} instructions per message")
        print(f"compiled/pure: {per['compiled'] / per['pure']:.2f}")
        return
    best = {name: float("inf") for name in paths}
    for _ in range(args.rounds):  # the paths alternate, fresh processes, best of the rounds
        for name, env in paths.items():
            code = (f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
                    f"import bench_native_path as b; print(b.run({args.messages}, {args.place}))")
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                 text=True, check=True).stdout
            best[name] = min(best[name], float(out) * 1e6 / args.messages)
    for name, us in best.items():
        print(f"{name}: {us:.2f} us per message (best of {args.rounds})")
    print(f"compiled/pure: {best['compiled'] / best['pure']:.2f}")


if __name__ == "__main__":
    main()
