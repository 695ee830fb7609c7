"""Run out of file descriptors when the log needs its next segment, in a process of its own
(its real RLIMIT_NOFILE is lowered): the child of ``tests/log/test_segment_unavailable.py``.

``python -m tests.workloads.descriptor_starved_writer DATA_DIR SEGMENT_SIZE``: fills the
active segment, takes every descriptor left, then tries a send, a batch, a prepare and a
commit (each must be refused retriably), frees the descriptors and tries again. Prints one
JSON line: what was refused and what succeeded while ``starved`` and once ``freed``, and
every message acknowledged (``[id, queue_id, queue_offset]``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections.abc import Callable

import fmq
from fmq.log.record import encoded_size

BODY = 3000


def broker_config(segment_size: int) -> fmq.BrokerConfig:
    """The configuration of the child and of the parent that reopens its data dir."""
    return fmq.BrokerConfig(segment_size=segment_size, max_message_size=4096,
                            checkpoint_interval_ms=0, retention_interval_ms=0,
                            queues_per_topic=2, tx_check_after_ms=60_000)


def message_body(tag: str) -> bytes:
    """The BODY-byte body of message ``tag`` (the tag, padded with dots)."""
    return tag.encode().ljust(BODY, b".")


def fill_active_segment(broker: fmq.Broker, acked: list, tag: str) -> None:
    """Send until the next message of BODY bytes no longer fits: the next write rolls."""
    size = encoded_size(fmq.Message("orders", message_body("x")))
    i = 0
    while broker._log.fits_in_active(size):
        mid = f"{tag}-{i}"
        r = broker.send(fmq.Message("orders", message_body(mid), queue_id=i % 2))
        acked.append([mid, r.queue_id, r.queue_offset])
        i += 1


def exhaust_descriptors() -> list[int]:
    """Lower the soft limit a little above what is open and take every descriptor left."""
    open_now = len(os.listdir("/proc/self/fd"))
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 16, hard))
    held = []
    while True:
        try:
            held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as exc:
            assert exc.errno == 24, exc  # EMFILE
            return held


def attempt(outcome: dict, what: str, fn: Callable[[], object]) -> object:
    """Run ``fn``; record in ``outcome`` whether it succeeded, was refused retriably, or
    found the log failed."""
    try:
        result = fn()
    except fmq.SegmentUnavailable as exc:
        assert exc.retriable
        outcome.setdefault("refused", []).append(what)
        return None
    except fmq.LogFailed:
        outcome.setdefault("log_failed", []).append(what)
        return None
    outcome.setdefault("succeeded", []).append(what)
    return result


def run(data: str, segment_size: int) -> None:
    """Runs in its own process (its descriptor limit is lowered); prints a JSON summary."""
    broker = fmq.Broker.open(data, broker_config(segment_size))
    acked: list = []
    starved: dict = {}
    freed: dict = {}
    msg = fmq.Message
    # A transaction prepared while descriptors are plentiful, committed while starved.
    early_tx = broker.transactions.prepare([msg("orders", message_body("early-tx"), queue_id=0)],
                                           "g")
    fill_active_segment(broker, acked, "fill")
    end_before = broker._log.next_offset
    held = exhaust_descriptors()
    attempt(starved, "send", lambda: broker.send(msg("orders", message_body("refused-send"))))
    attempt(starved, "batch", lambda: broker.send_batch(
        [msg("orders", message_body(f"refused-batch-{i}"), queue_id=i % 2) for i in range(5)]))
    attempt(starved, "prepare", lambda: broker.transactions.prepare(
        [msg("orders", message_body("refused-prepare"))], "g"))
    attempt(starved, "commit", lambda: broker.transactions.commit(early_tx))
    starved["end_unchanged"] = broker._log.next_offset == end_before
    starved["log_failed"] = starved.get("log_failed", [])
    starved["failed_state"] = repr(broker._log.failed) if broker._log.failed else None
    for fd in held:
        os.close(fd)
    r = attempt(freed, "send", lambda: broker.send(msg("orders", message_body("after-send"),
                                                        queue_id=0)))
    if r is not None:
        acked.append(["after-send", r.queue_id, r.queue_offset])
    rs = attempt(freed, "batch", lambda: broker.send_batch(
        [msg("orders", message_body(f"after-batch-{i}"), queue_id=i % 2) for i in range(5)]))
    for i, r in enumerate(rs or ()):
        acked.append([f"after-batch-{i}", r.queue_id, r.queue_offset])
    attempt(freed, "commit", lambda: broker.transactions.commit(early_tx))
    fill_active_segment(broker, acked, "more")  # the log keeps rolling
    attempt(freed, "send-after-roll",
            lambda: broker.send(msg("orders", message_body("z"), queue_id=1)))
    broker.close()
    print(json.dumps({"starved": starved, "freed": freed, "acked": acked}))


def main(argv: list[str]) -> None:
    data_dir, segment_size = argv
    run(data_dir, int(segment_size))


if __name__ == "__main__":
    main(sys.argv[1:])
