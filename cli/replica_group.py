"""``fmq replica status`` given several addresses: every node of a broker group asked for
its own REPL_STATUS, shown as one table (or one JSON list), so an operator sees the whole
group in one command (docs/replication.md, *What an operator does*)."""

from __future__ import annotations

import json
from typing import Any

from fmq.cli import output as out
from fmq.cli.client_options import client_kwargs

from fmq.client import Client
from fmq.client.connection import parse_servers
from fmq.errors import FMQError
from fmq.protocol import Op

#: Seconds to wait for one node: an unreachable node must not hold up the others for long.
NODE_TIMEOUT_S = 5.0

NODE_COLUMNS: list[out.Column] = [
    ("ADDRESS", lambda n: n["address"]),
    ("NODE", lambda n: n.get("node") or None),
    ("ROLE", lambda n: _role(n)),
    ("EPOCH", lambda n: n.get("epoch")),
    ("DURABLE END", lambda n: n.get("durable_end")),
    ("LAG", lambda n: None if n.get("lag_bytes") is None else out.size(n["lag_bytes"])),
    ("IN SYNC", lambda n: n.get("in_sync_member")),
    ("ERROR", lambda n: n.get("error")),
]


def _role(n: dict) -> str | None:
    if "role" not in n:
        return None
    if n["role"] == "primary":
        return f"primary ({n.get('ack_mode', '?')}, min_insync {n.get('min_insync', '?')})"
    return f"follower of {n['primary']}" if n.get("primary") else "follower, no primary"


def ask_node(address: str) -> dict[str, Any]:
    """One node's REPL_STATUS with its ``address``, or the address and why it did not
    answer (``error``)."""
    try:
        with Client(address, retries=0, request_timeout=NODE_TIMEOUT_S,
                    connect_timeout=NODE_TIMEOUT_S, **client_kwargs()) as client:
            status = json.loads(client.call(Op.REPL_STATUS, {})["json"])
    except FMQError as exc:
        return {"address": address, "error": str(exc)}
    return {**status, "address": address}


def group_status(servers: str) -> list[dict[str, Any]]:
    """Every listed node's status, in the order given. Each answering follower gets
    ``lag_bytes``: how far its durable end is behind the primary's (the primary of the
    newest epoch among the answers; without one, the follower's own figure from its last
    fetch) and ``in_sync_member``: whether that primary counts it in sync (by the address
    the follower reports under, never its node name). The primary's
    lag is 0."""
    nodes = [ask_node(f"{host}:{port}") for host, port in parse_servers(servers)]
    primaries = [n for n in nodes if n.get("role") == "primary"]
    primary = max(primaries, key=lambda n: n.get("epoch", 0), default=None)
    for n in nodes:
        if n.get("role") == "primary":
            n["lag_bytes"] = 0
        elif n.get("role") == "follower" and primary is not None:
            n["lag_bytes"] = max(0, primary["durable_end"] - n["durable_end"])
            # The in-sync set names followers by the address they report under, which
            # differs from their node name in an etcd group (--node n1).
            n["in_sync_member"] = n.get("reports_as", n["address"]) in primary.get("in_sync", [])
    return nodes


def render_group(nodes: list[dict[str, Any]]) -> str:
    return out.table(nodes, NODE_COLUMNS)
