"""Issue 37 with real ``fmq server`` processes and a real etcd: after a run of crashes and
lone-node elections (``min_insync`` 2 of 3 lets one node alone take the lease), a
returning node whose newest term its primary never knew must still rejoin.

Three nodes, ``sync``, ``min_insync`` 2, 128 KiB segments. A leads epoch 1 with B and C in
sync (40 acknowledged sends); B and C are paused and A stores 60 sends nobody
acknowledged; all die. B alone wins epoch 2 (its EPOCH record at Y, where its copy of A's
epoch 1 ended) and stores 25 unacknowledged sends (ending at W); dies. A alone wins epoch 3
(EPOCH at X, past W); dies. B alone wins epoch 4 (EPOCH at W). A and C start. A asks where
its epoch 3 ends in B's log; B answers its epoch 2, ending at W, inside one of A's own
records: before the fix A cut there and exited ("... is not the offset of a record or of
damage"), and the group stayed degraded. The logs last agree at Y: A must cut there, and
the group be whole again with the 40 acknowledged messages on every node.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from fmq.client import Client
from fmq.datadir import LOG_DIR
from fmq.errors import FMQError, NotEnoughReplicas
from fmq.log.record import RecordType
from fmq.log.scanner import LogScanner
from fmq.message import Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire
from tests.etcdkit import ETCD
from tests.server.harness import ServerProcess

from .cluster import pull_all, status
from .failover_kit import GROUP_CONFIG, QUEUES, FailoverGroup, role_of

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

CONFIG = {**GROUP_CONFIG, "min_insync": 2}
TOPIC = "t"


def send(node: ServerProcess, tag: str, count: int, size: int, acknowledged: bool,
         timeout: float = 60.0) -> list[bytes]:
    """Send ``count`` messages of about ``size`` bytes to ``node`` one by one. Acknowledged:
    retry refusals (an election, followers catching up) within ``timeout``. Not: each must
    be stored and refused with NotEnoughReplicas (no follower in sync)."""
    sent: list[bytes] = []
    deadline = time.monotonic() + timeout
    with Client(node.address, retries=0, request_timeout=15) as c:
        while len(sent) < count and time.monotonic() < deadline:
            body = f"{tag}-{len(sent)}-".encode().ljust(size, b"x")
            request = {"message": message_to_wire(Message(TOPIC, body, key=str(len(sent))))}
            try:
                c.call(Op.SEND, request)
            except NotEnoughReplicas:
                if acknowledged:
                    time.sleep(0.1)
                    continue
                sent.append(body)
                continue
            except FMQError as exc:
                assert acknowledged and exc.retriable, exc
                time.sleep(0.1)
                continue
            assert acknowledged, f"{tag}: acknowledged with no follower in sync"
            sent.append(body)
    assert len(sent) == count, f"{tag}: only {len(sent)} of {count} within {timeout}s"
    return sent


def wait_alone_primary(node: ServerProcess, timeout: float = 40.0) -> int:
    """Wait until ``node``, started alone, has won the lease and serves as primary; its
    epoch."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = role_of(node)
        if st["role"] == "primary":
            return st["epoch"]
        time.sleep(0.1)
    raise AssertionError(f"{node.address} did not win the lease alone: {role_of(node)}\n"
                         f"{node.log()[-3000:]}")


def epochs(node: ServerProcess) -> list[tuple[int, int]]:
    """(epoch, offset) of every EPOCH record in a stopped node's log."""
    return [(r.queue_offset, r.log_offset)
            for r in LogScanner(os.path.join(node.data_dir, LOG_DIR))
            if r.type == RecordType.EPOCH]


def log_end(node: ServerProcess) -> int:
    scanner = LogScanner(os.path.join(node.data_dir, LOG_DIR))
    for _ in scanner:
        pass
    return scanner.end_offset


def record_offsets(node: ServerProcess) -> set[int]:
    return {r.log_offset for r in LogScanner(os.path.join(node.data_dir, LOG_DIR))}


def bodies(node: ServerProcess) -> list[bytes]:
    return [bytes(b) for q in pull_all(node, TOPIC, QUEUES) for _q, _o, b in q]


def test_a_node_whose_term_the_primary_never_knew_rejoins(tmp_path):
    group = FailoverGroup(str(tmp_path), config=CONFIG).start()
    try:
        # (1) Whole under A, epoch 1: 40 acknowledged sends.
        a = group.wait_whole(timeout=60)
        b, c = group.others(a)
        assert status(a)["epoch"] == 1
        acked = send(a, "acked", 40, 200, acknowledged=True)

        # (2) B and C paused; A stores 60 sends nobody acknowledges; all die.
        for node in (b, c):
            node.proc.send_signal(signal.SIGSTOP)
        send(a, "a-only", 60, 700, acknowledged=False)
        for node in (a, b, c):  # A first: B and C copy nothing more (SIGKILL ends a paused one)
            node.kill()

        # (3) B alone: epoch 2 at Y; 25 unacknowledged sends, ending at W.
        b.start()
        assert wait_alone_primary(b) == 2
        send(b, "b-only", 25, 300, acknowledged=False)
        b.kill()
        b_epochs = epochs(b)
        assert [e for e, _ in b_epochs] == [1, 2], b_epochs
        y, w = b_epochs[1][1], log_end(b)

        # (4) A alone: epoch 3 at X.
        a.start()
        assert wait_alone_primary(a) == 3
        a.kill()
        a_epochs = epochs(a)
        assert [e for e, _ in a_epochs] == [1, 3], a_epochs
        x = a_epochs[1][1]
        # The state of the issue: the two logs part at Y, and W (where B's epoch 2 ends)
        # lies inside one of A's records, before X.
        assert y < w < x and w not in record_offsets(a) and y in record_offsets(a)

        # (5) B alone: epoch 4 at W.
        b.start()
        assert wait_alone_primary(b) == 4

        # (6) A and C return: A cuts at Y and follows, the group is whole.
        a.start()
        c.start()
        primary = group.wait_whole(timeout=60)
        assert primary is b
        _, end = group.assert_identical()
        cuts = [int(m) for m in re.findall(r"cut the log at (\d+)", a.log())]
        assert cuts == [y], (cuts, y, w, x)
        for node in group.nodes:
            stored = bodies(node)
            missing = [m for m in acked if m not in stored]
            assert not missing, f"{node.address} lacks {len(missing)} acknowledged sends"
        assert end > w
    except BaseException:
        print(group.logs())
        raise
    finally:
        group.kill()
