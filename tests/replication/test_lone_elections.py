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

The same with two more lone terms (B, A, B, A, B) makes A ask EPOCH_END three times. The
whole family of such runs is checked offline, exhaustively, in test_epoch_negotiation.py.
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
from fmq.index.entries import EpochEntry
from fmq.index.epochs import epoch_end, last_epoch
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


def single_question_cut(mine: list[tuple[int, int]], mine_end: int,
                        theirs: list[tuple[int, int]], theirs_end: int) -> int:
    """Where the follower cut before issue 37's fix: one EPOCH_END for its newest epoch, its
    own end of the largest epoch at or below the answer against the primary's."""
    mine_h = [EpochEntry(e, o, "") for e, o in mine]
    theirs_h = [EpochEntry(e, o, "") for e, o in theirs]
    answered, their_end = epoch_end(theirs_h, last_epoch(mine_h), theirs_end)
    return min(mine_end, epoch_end(mine_h, answered, mine_end)[1], their_end)


@pytest.mark.parametrize("alternations,a_sends", [(1, 0), (2, 10)],
                         ids=["issue-37", "two-more-lone-terms"])
def test_a_node_whose_term_the_primary_never_knew_rejoins(tmp_path, alternations, a_sends):
    """issue-37: the issue's sequence (B, A, B elected alone). two-more-lone-terms: B, A,
    B, A, B alone, A storing 10 unacknowledged sends in each of its terms: A has to ask
    three times."""
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

        # (3)-(5) Lone elections, B and A in turn: B stores 25 unacknowledged sends in
        # each of its terms (the first one starts at Y), A ``a_sends`` in each of its; each
        # node dies but the last, B, whose last term starts where its log ended (W).
        lone = [b, a] * alternations
        for epoch, node in enumerate(lone, start=2):
            node.start()
            assert wait_alone_primary(node) == epoch
            if node is b:
                send(b, f"b-only-{epoch}", 25, 300, acknowledged=False)
            elif a_sends:
                send(a, f"a-only-{epoch}", a_sends, 700, acknowledged=False)
            node.kill()
        last = len(lone) + 2
        a_epochs, b_epochs = epochs(a), [*epochs(b), (last, log_end(b))]
        assert [e for e, _ in a_epochs] == [1, *range(3, last, 2)], a_epochs
        assert [e for e, _ in b_epochs] == [1, *range(2, last + 1, 2)], b_epochs
        y, w = b_epochs[1][1], b_epochs[-1][1]
        # The state of the issue: the logs part at Y, and one question would not cut there
        # (in the sequence W, where B's epoch 2 ends, lies inside one of A's
        # records, so A refused the cut and exited).
        old_cut = single_question_cut(a_epochs, log_end(a), b_epochs, w)
        assert y in record_offsets(a) and old_cut != y, (y, old_cut, a_epochs, b_epochs)
        if alternations == 1:
            assert old_cut == w and w not in record_offsets(a)
        b.start()
        assert wait_alone_primary(b) == last

        # (6) A and C return: A cuts at Y and follows, the group is whole.
        a.start()
        c.start()
        primary = group.wait_whole(timeout=60)
        assert primary is b
        _, end = group.assert_identical()
        log = a.log()
        cuts = [int(m) for m in re.findall(r"cut the log at (\d+)", log)]
        assert cuts == [y], (cuts, y, w)
        assert f"({alternations + 1} EPOCH_END questions)" in log
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
