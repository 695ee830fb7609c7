"""Errors of a broker group: a primary, its followers and the coordinator."""

from __future__ import annotations

from fmq.errors.base import FMQError


class ReplicationError(FMQError):
    """Base class of the errors of a broker group (a primary and its followers)."""

    code = 80


class NotPrimary(ReplicationError):
    """A write sent to a follower: followers take writes only from their primary."""

    code = 81
    retriable = True
    fields = {"primary": str}
    message_format = ("this server is a follower of {primary} and takes no writes: send "
                      "them to the primary at {primary}")

    def __init__(self, primary: str) -> None:
        super().__init__(self.message_format.format(primary=primary))
        self.primary = primary


class NotEnoughReplicas(ReplicationError):
    """``ack_mode = "sync"`` and fewer than ``min_insync`` followers have the record.

    The request was not acknowledged, but what it wrote stays in the primary's log (and
    reaches the followers once they catch up): a retry may store a message twice."""

    code = 82
    retriable = True
    fields = {"in_sync": int, "min_insync": int}
    message_format = (
        "only {in_sync} followers are in sync, fewer than min_insync ({min_insync}): the "
        "request was not acknowledged, though its records may be in the log; retry once "
        "followers catch up (fmq replica status)")

    def __init__(self, in_sync: int, min_insync: int) -> None:
        super().__init__(self.message_format.format(in_sync=in_sync, min_insync=min_insync))
        self.in_sync = in_sync
        self.min_insync = min_insync


class OffsetNotReplicated(ReplicationError):
    """A consumer offset commit past the high watermark: the messages from
    ``visible_offset`` on are not yet on ``min_insync`` followers, so no consumer was given
    them, and a fail-over may give their queue offsets to other messages."""

    code = 87
    retriable = True
    fields = {"next_offset": int, "visible_offset": int}
    message_format = (
        "next_offset {next_offset} is past the messages the followers hold: from queue "
        "offset {visible_offset} on they are not replicated yet and were not delivered; "
        "commit at most {visible_offset}, or retry once the followers catch up "
        "(fmq replica status)")

    def __init__(self, next_offset: int, visible_offset: int) -> None:
        super().__init__(self.message_format.format(next_offset=next_offset,
                                                    visible_offset=visible_offset))
        self.next_offset = next_offset
        self.visible_offset = visible_offset


class ReplicaBehindRetention(ReplicationError):
    """A follower asks for log bytes its primary has already deleted (retention)."""

    code = 83
    fields = {"offset": int, "first_offset": int}
    message_format = (
        "the follower needs the log from offset {offset}, but the primary's log starts at "
        "{first_offset} (retention deleted the rest): give the follower a fresh copy: stop "
        "it, empty its data directory, run fmq replica bootstrap there, start it again")

    def __init__(self, offset: int, first_offset: int) -> None:
        super().__init__(self.message_format.format(offset=offset, first_offset=first_offset))
        self.offset = offset
        self.first_offset = first_offset


class ReplicaDiverged(ReplicationError):
    """A follower's log does not continue the primary's: it holds bytes the primary lacks."""

    code = 84
    fields = {"offset": int, "end": int}
    message_format = (
        "the follower's log does not match the primary's at offset {offset} (the primary's "
        "durable end is {end}): the follower holds records the primary never had; cut it "
        "with fmq log repair --cut-at or give it a fresh copy (docs/replication.md)")

    def __init__(self, offset: int, end: int) -> None:
        super().__init__(self.message_format.format(offset=offset, end=end))
        self.offset = offset
        self.end = end


class StalePrimary(ReplicationError):
    """A node asked to be followed is in an older term than the node asking: it is not the
    group's primary any more (a returning old primary that has not yet stepped down)."""

    code = 85
    retriable = True
    fields = {"epoch": int, "follower_epoch": int}
    message_format = (
        "this node is in epoch {epoch}, older than epoch {follower_epoch} of the node "
        "following it: it is no longer the group's primary; point the follower at the "
        "current primary (fmq replica status on each node shows its epoch)")

    def __init__(self, epoch: int, follower_epoch: int) -> None:
        super().__init__(self.message_format.format(epoch=epoch,
                                                    follower_epoch=follower_epoch))
        self.epoch = epoch
        self.follower_epoch = follower_epoch


class LeadershipLost(NotPrimary):
    """A primary that can no longer prove it holds the group's lease (etcd) answers its
    writes with this instead of an acknowledgement: their records may be in its log, but
    nobody was told they are durable."""

    code = 86
    message_format = ("this node lost the primary's lease and acknowledges nothing more: "
                      "the request was not acknowledged (its records may be in this node's "
                      "log); retry on the group's primary [{primary}] (empty while an "
                      "election runs)")


class CoordinatorUnavailable(FMQError):
    """The coordinator (etcd) could not be reached: leadership cannot be proved meanwhile."""

    code = 89
    retriable = True
