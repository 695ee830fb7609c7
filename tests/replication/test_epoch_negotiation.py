"""Where a returning node cuts its log (:func:`fmq.replication.term.divergence_point`),
checked offline against a model of a broker group's logs.

The model keeps each node's log as a list of records (an id shared by every copy of the
record, a size, the epoch of an EPOCH record). A term is an election (a new epoch from the
group's counter, the EPOCH record appended to the new primary's log), the primary's
writes, and followers that join it (cut where the negotiation says, then copy a prefix of
its log). Whatever the script, the cut must be where the two logs last agree (the end of
their longest common prefix of records), a record boundary in both.

Issue 37: with lone-node elections (``min_insync`` 2 of 3 lets a node alone take the
lease) a returning node asked where its epoch 3 ends, the primary answered its epoch 2,
which the node never held, and the node cut at its own epoch 1's end against the primary's
epoch 2's end: inside one of its records.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import NamedTuple

import pytest

from fmq.errors import ReplicationError
from fmq.index.entries import EpochEntry
from fmq.index.epochs import epoch_end, last_epoch
from fmq.replication.term import divergence_point

EPOCH_SIZE = 40  # an EPOCH record's size in the model (any size works)
NODES = ("n1", "n2", "n3")


class Rec(NamedTuple):
    rid: int  # the same in every copy of the record
    size: int
    epoch: int = 0  # an EPOCH record's epoch (0: a message)


@dataclass
class Group:
    """The nodes' logs, the group's epoch counter (etcd's), and the checks made."""

    logs: dict[str, list[Rec]] = field(default_factory=lambda: {n: [] for n in NODES})
    counter: int = 0
    next_rid: int = 0
    primary: str = ""
    checked: int = 0  # negotiations checked
    cut: int = 0  # of them, how many cut something

    def elect(self, node: str) -> None:
        self.counter += 1
        self.primary = node
        self._append(node, EPOCH_SIZE, self.counter)

    def write(self, sizes: list[int]) -> None:
        for size in sizes:
            self._append(self.primary, size, 0)

    def _append(self, node: str, size: int, epoch: int) -> None:
        self.next_rid += 1
        self.logs[node].append(Rec(self.next_rid, size, epoch))

    def join(self, node: str, copy: int | None = None) -> None:
        """``node`` follows the primary: negotiates (checked), is cut, copies ``copy``
        more records of the primary's log (None: all of it)."""
        mine, theirs = self.logs[node], self.logs[self.primary]
        agreed = negotiate(self, node)
        kept = boundaries(mine).index(agreed)  # records kept: the cut is a boundary
        del mine[kept:]
        upto = len(theirs) if copy is None else min(len(theirs), kept + copy)
        mine.extend(theirs[kept:upto])

    def copy_more(self, node: str, count: int) -> None:
        """A follower that joined this term copies ``count`` more records."""
        mine, theirs = self.logs[node], self.logs[self.primary]
        assert theirs[:len(mine)] == mine
        mine.extend(theirs[len(mine):len(mine) + count])


def history(log: list[Rec], node: str = "x") -> list[EpochEntry]:
    out, offset = [], 0
    for rec in log:
        if rec.epoch:
            out.append(EpochEntry(rec.epoch, offset, node))
        offset += rec.size
    return out


def boundaries(log: list[Rec]) -> list[int]:
    """Every record boundary of ``log``: 0, each record's end."""
    return list(itertools.accumulate((r.size for r in log), initial=0))


def agreed_end(a: list[Rec], b: list[Rec]) -> int:
    """The end of the longest common prefix of records: where the two logs last agree."""
    same = 0
    while same < min(len(a), len(b)) and a[same] == b[same]:
        same += 1
    return boundaries(a)[same]


def negotiate(group: Group, node: str) -> int:
    """The cut ``node`` computes against the primary, as the follower does it (the primary
    answering EPOCH_END as its server does), checked against the model's truth; returns
    the true agreed end."""
    mine, theirs = group.logs[node], group.logs[group.primary]
    truth = agreed_end(mine, theirs)
    mine_history, their_history = history(mine), history(theirs)
    mine_bounds, their_bounds = boundaries(mine), boundaries(theirs)
    end, their_end = mine_bounds[-1], their_bounds[-1]
    if last_epoch(mine_history) == last_epoch(their_history):
        # One term (the follower skips the negotiation): one primary wrote it all, so this
        # log is a prefix of the primary's.
        assert truth == end
        return truth
    assert last_epoch(mine_history) < last_epoch(their_history)
    asked: list[int] = []

    def ask(epoch: int) -> tuple[int, int]:
        asked.append(epoch)
        return epoch_end(their_history, epoch, their_end)

    cut = divergence_point(mine_history, end, ask)
    group.checked += 1
    group.cut += cut < end
    if (cut != truth or cut not in mine_bounds or cut not in their_bounds
            or len(asked) > len(mine_history) + 1):
        raise AssertionError(
            f"{node} {[(e.epoch, e.start) for e in mine_history]} (end {end}) against "
            f"primary {group.primary} {[(e.epoch, e.start) for e in their_history]} (end "
            f"{their_end}): asked {asked}, cut at {cut} (a record boundary: here "
            f"{cut in mine_bounds}, there {cut in their_bounds}), but the logs last agree "
            f"at {truth}")
    return truth


def test_the_issue_histories():
    """The outside reproduction's EPOCH records: A (n1) [(0, 1), (60060, 3)], B (n2, the
    primary) [(0, 1), (11504, 2), (23744, 4)]; the two logs last agree at 11504."""
    a = [EpochEntry(1, 0, "n1"), EpochEntry(3, 60060, "n1")]
    b = [EpochEntry(1, 0, "n1"), EpochEntry(2, 11504, "n2"), EpochEntry(4, 23744, "n2")]
    asked: list[int] = []

    def ask(epoch: int) -> tuple[int, int]:
        asked.append(epoch)
        return epoch_end(b, epoch, 23744 + EPOCH_SIZE)

    assert divergence_point(a, 60060 + EPOCH_SIZE, ask) == 11504
    assert asked == [3, 1]  # B answered epoch 2 to the first: A asks again for its epoch 1


def test_the_issue_sequence_in_the_model():
    """Steps (1) to (6) of issue 37: A, B and C as n1, n2 and n3."""
    g = Group()
    g.elect("n1")
    g.join("n2")
    g.join("n3")
    g.write([100] * 40)  # acknowledged
    g.copy_more("n2", 40)
    g.copy_more("n3", 40)
    g.write([100] * 60)  # B and C paused: none acknowledged, B copied 10 of them
    g.copy_more("n2", 10)
    g.elect("n2")  # B alone
    g.write([100] * 25)
    g.elect("n1")  # A alone
    g.elect("n2")  # B alone
    g.join("n1")  # the defect: cut at B's epoch 2's end, inside A's records
    g.join("n3")
    assert g.logs["n1"] == g.logs["n2"] == g.logs["n3"]
    assert g.cut == 1


def lone_script(first: tuple[int, int], terms: tuple[tuple[int, int], ...],
                sizes: random.Random) -> Group:
    """n1 leads epoch 1 with n2 and n3 following; it writes 4 records, of which n2 copied
    ``first[0]`` and n3 ``first[1]``. Then each of ``terms`` is a lone election: (node
    index, how many records it writes). Every other node's negotiation with each new
    primary is checked (on a copy: a lone primary's followers never got to cut); at the
    end the others join the last primary."""
    g = Group()
    g.elect("n1")
    g.join("n2")
    g.join("n3")
    g.write([sizes.randrange(50, 200) for _ in range(4)])
    g.copy_more("n2", first[0])
    g.copy_more("n3", first[1])
    for who, writes in terms:
        g.elect(NODES[who])
        g.write([sizes.randrange(50, 200) for _ in range(writes)])
        for other in NODES:
            if other != g.primary:
                negotiate(g, other)
    for other in NODES:
        if other != g.primary:
            g.join(other)
    assert all(log == g.logs[g.primary] for log in g.logs.values())
    return g


def test_lone_elections_exhaustively():
    """Every run of four lone-node elections (any node, writing 0 or 2 records) after a
    first term that n2 and n3 copied 0, 2 or all 4 of: 9 x 1296 scripts."""
    sizes = random.Random(37)
    checked = cut = 0
    steps = list(itertools.product(range(3), (0, 2)))
    for first in itertools.product((0, 2, 4), repeat=2):
        for terms in itertools.product(steps, repeat=4):
            g = lone_script(first, terms, sizes)
            checked, cut = checked + g.checked, cut + g.cut
    assert cut > 1000 and checked > 100_000  # the family does cut, often


@pytest.mark.parametrize("seed", range(40))
def test_random_group_histories(seed):
    """Terms with any mix of followers: some join the new primary at once and copy part of
    its log, some join later, some never; a follower may reconnect (same term); nodes
    elected alone or with followers."""
    rng = random.Random(seed)
    g = Group()
    for _ in range(60):
        g.elect(rng.choice(NODES))
        joined = [n for n in NODES if n != g.primary and rng.random() < 0.6]
        for node in joined:
            g.join(node, copy=rng.choice((0, 1, 3, None)))
        for _ in range(rng.randrange(4)):
            g.write([rng.randrange(30, 300) for _ in range(rng.randrange(1, 4))])
            for node in joined:
                g.copy_more(node, rng.randrange(4))
            if joined and rng.random() < 0.3:
                g.join(rng.choice(joined), copy=rng.choice((0, 2, None)))
    for node in NODES:
        if node != g.primary:
            g.join(node)
    assert all(log == g.logs[g.primary] for log in g.logs.values())
    assert g.checked > 20


def test_a_primary_answering_above_the_epoch_asked_is_refused():
    """Its server answers the largest epoch at or below the one asked; anything else would
    let the questions go on without falling."""
    mine = [EpochEntry(1, 0, "a"), EpochEntry(3, 500, "a")]
    with pytest.raises(ReplicationError, match="above the one asked"):
        divergence_point(mine, 900, lambda epoch: (epoch + 1, 400))
