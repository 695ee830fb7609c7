"""``fmq replica bootstrap``: prepare an empty data directory to follow a primary whose log
no longer starts at offset 0 (retention deleted its oldest segments).

The new follower's log starts where the primary's does: this creates the primary's first
segment there, empty (zero-filled, the same size), and the follower then copies everything
from it, sealed segments first. Nothing the follower would need lies before that point:
retention never deletes a segment the primary's checkpoint still reaches, so every open
transaction and every consumable message is at or after the first segment, and the index
the follower builds from there is the primary's. The one thing the log no longer says is
where the queues that retention emptied stand: their next offsets are written to the
follower's queue-floors file (as retention writes the primary's), so they continue at the
same offsets.
"""

from __future__ import annotations

import json
import os

from fmq.client.connection import Connection, parse_servers
from fmq.datadir import LOG_DIR, QUEUE_FLOORS_FILE, DataDirLock
from fmq.errors import InvalidArgument
from fmq.log.fileio import OS_IO
from fmq.log.reader import list_segments
from fmq.log.segment import Segment
from fmq.protocol import Op
from fmq.recovery.floors import Floors, write_floors


def bootstrap(data_dir: str, primary: str) -> dict:
    """Make ``data_dir`` (new or empty of log segments) ready to follow ``primary``; returns
    ``{"primary", "first_offset", "segment_size"}``."""
    log_dir = os.path.join(data_dir, LOG_DIR)
    if os.path.isdir(log_dir) and list_segments(log_dir):
        raise InvalidArgument(f"{data_dir} already holds a log: bootstrap only prepares an "
                              f"empty data directory (move this one away first)")
    conn = Connection(parse_servers(primary)[0])
    try:
        status = json.loads(conn.request(Op.REPL_STATUS, {}, 10.0)["json"])
        if status["role"] != "primary":
            raise InvalidArgument(f"{primary} is a follower of {status.get('primary')}: "
                                  f"bootstrap from the primary")
        floors = emptied_queues(conn)
    finally:
        conn.close()
    first, size = status["first_offset"], status["first_segment_size"]
    os.makedirs(log_dir, exist_ok=True)
    lock = DataDirLock(os.path.abspath(data_dir))
    lock.acquire()  # no server may be running on it meanwhile
    try:
        if floors:
            write_floors(os.path.join(data_dir, QUEUE_FLOORS_FILE), floors)
        if size:
            Segment.create(log_dir, first, size, OS_IO).close()
    finally:
        lock.release()
    return {"primary": primary, "first_offset": first, "segment_size": size,
            "queue_floors": len(floors)}


def emptied_queues(conn: Connection) -> Floors:
    """The next offset of every queue of the primary that has none of its messages left."""
    topics = json.loads(conn.request(Op.TOPICS, {}, 30.0)["json"])["topics"]
    floors: Floors = {}
    for t in topics:
        for queue_id in range(t["queues"]):
            r = conn.request(Op.QUEUE_RANGE, {"topic": t["topic"], "queue_id": queue_id},
                             30.0)
            if r["min_offset"] == r["next_offset"] > 0:
                floors[(t["topic"], queue_id)] = r["next_offset"]
    return floors
