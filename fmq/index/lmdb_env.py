"""The LMDB environment of the index: its named databases, the gate that lets the map grow
while readers come and go, and which LMDB errors are worth a retry."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import lmdb

from fmq.errors import FMQError, IndexUnavailable

#: The databases derived from the log, in the order a rebuild writes and compares them.
DERIVED_DBS = (b"cq", b"queues", b"keys", b"keyoff", b"time", b"txends", b"txoff", b"consumers",
               b"timers", b"timeroff", b"timertopics", b"topics", b"meta")
#: ``meta`` keys.
APPLIED = b"applied"
FORMAT = b"format"
#: Present once the consumer offsets are derived from the log's OFFSET records; an index
#: from before holds offsets only the index knows (the broker writes them to the log once).
OFFSETS_IN_LOG = b"offsets-in-log"


@dataclass(frozen=True)
class Databases:
    """The handles of the index's named databases (see :mod:`fmq.index.store` for their keys)."""

    cq: object
    queues: object
    keys: object
    keyoff: object
    time: object
    txends: object
    txoff: object
    timers: object
    timeroff: object
    timertopics: object
    meta: object
    topics: object
    consumers: object

    @classmethod
    def open(cls, env: lmdb.Environment) -> Databases:
        return cls(*(env.open_db(name.encode()) for name in cls.__dataclass_fields__))

    def derived(self) -> dict[str, object]:
        """The databases derived from the log but ``meta``, by name."""
        return {"cq": self.cq, "queues": self.queues, "keys": self.keys, "keyoff": self.keyoff,
                "time": self.time, "txends": self.txends, "txoff": self.txoff,
                "consumers": self.consumers, "timers": self.timers, "timeroff": self.timeroff,
                "timertopics": self.timertopics, "topics": self.topics}


#: LMDB errors that say "not now" (space, memory, reader slots, locks), not "damaged" or
#: "misused": retrying the same write later can succeed.
_TRANSIENT_LMDB = (lmdb.DiskError, lmdb.MemoryError, lmdb.MapFullError, lmdb.MapResizedError,
                   lmdb.ReadersFullError, lmdb.TlsFullError, lmdb.LockError)


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the same index write later may succeed: ENOSPC, EIO and their kin
    from LMDB or from reading the log. Corruption and bugs are not (py-lmdb raises the
    plain ``lmdb.Error`` for an OS error it has no class for, EIO among them)."""
    return (isinstance(exc, OSError) or type(exc) is lmdb.Error
            or isinstance(exc, _TRANSIENT_LMDB))


def no_room_at_open(exc: BaseException, path: str) -> FMQError | None:
    """What an open that could not bring the index at ``path`` up to date because LMDB
    found no room (a full disk, a map it cannot grow) raises instead of ``exc``; None for
    any other failure."""
    if not isinstance(exc, lmdb.Error) or not is_transient(exc):
        return None
    return IndexUnavailable(f"cannot bring the index at {path} up to date: {exc}; free "
                            f"space on that file system (the index grows as it catches "
                            f"up with the log), then open again")


class ResizeGate:
    """Readers and writers enter freely; a map resize waits until nobody is inside
    (py-lmdb forbids ``set_mapsize`` while any transaction of the process is open)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._inside = 0
        self._resizing = False

    def __enter__(self) -> None:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._inside += 1

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._inside -= 1
            self._cond.notify_all()

    def resize(self, env: lmdb.Environment) -> None:
        """Double the map; the caller must not be inside the gate."""
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._resizing = True
            while self._inside:
                self._cond.wait()
            try:
                env.set_mapsize(env.info()["map_size"] * 2)
            finally:
                self._resizing = False
                self._cond.notify_all()

    def adopt(self, env: lmdb.Environment) -> None:
        """For a caller inside the gate whose ``begin`` raised ``MapResizedError``: another
        process (the indexer process, or the broker) grew the map. Leave the gate, take
        the new size once nobody is inside (``set_mapsize(0)`` reads it from the meta
        page), enter again."""
        with self._cond:
            self._inside -= 1
            if self._resizing:  # another thread adopts it (or grows it further)
                while self._resizing:
                    self._cond.wait()
            else:
                self._resizing = True
                while self._inside:
                    self._cond.wait()
                try:
                    env.set_mapsize(0)
                finally:
                    self._resizing = False
                    self._cond.notify_all()
            self._inside += 1


class SharedEnv:
    """The LMDB environment as the index's code uses it, when more than one process writes
    it: a transaction that finds the map grown by the other process adopts the new size
    (through the gate) and begins again, instead of failing."""

    def __init__(self, env: lmdb.Environment, gate: ResizeGate) -> None:
        self._env = env
        self._gate = gate

    def begin(self, **kwargs: object) -> lmdb.Transaction:
        while True:
            try:
                return self._env.begin(**kwargs)
            except lmdb.MapResizedError:
                self._gate.adopt(self._env)

    def __getattr__(self, name: str) -> object:
        return getattr(self._env, name)
