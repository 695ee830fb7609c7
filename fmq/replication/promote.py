"""``fmq replica promote``: make a follower the primary by hand, without etcd.

Offline (a stopped follower's data directory): open the broker as a primary (recovery
ends what the old primary left half-way), start a new term one above the highest epoch the
log knows (the EPOCH record, fdatasync'd), close it. The node is then started without
``--follow``. Online (``--server``), the PROMOTE operation asks a running follower to do
the same in place (:mod:`fmq.server.lifecycle`).
"""

from __future__ import annotations

import json
import time

from fmq.client import Client
from fmq.config import BrokerConfig
from fmq.datadir import require_data_dir
from fmq.errors import FMQError, RequestTimeout
from fmq.protocol import Op
from fmq.replication.term import open_as_primary


def promote_offline(data_dir: str, node: str, config: BrokerConfig | None = None) -> dict:
    """Start a new term in the stopped broker at ``data_dir``; what was written."""
    require_data_dir(data_dir)  # Broker.open would create a data dir anywhere
    broker, entry = open_as_primary(data_dir, config or BrokerConfig(), 0, node)
    broker.close()
    return {"epoch": entry.epoch, "node": entry.node, "offset": entry.start}


def promote_online(client: Client, node: str, timeout: float = 60.0) -> dict:
    """Ask the follower ``client`` reaches to become the primary; return its status once it
    serves as one (RequestTimeout after ``timeout`` seconds)."""
    answer = json.loads(client.call(Op.PROMOTE, {"node": node}, retries=0)["json"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        try:
            status = json.loads(client.call(Op.REPL_STATUS, {}, retries=0)["json"])
        except FMQError as exc:
            if not exc.retriable:
                raise
            continue  # it is reopening its broker
        if status["role"] == "primary" and status.get("epoch", 0) >= answer["epoch"]:
            return status
    raise RequestTimeout(f"the server did not serve as primary of epoch {answer['epoch']} "
                         f"within {timeout:.0f}s; see its log and fmq replica status")
