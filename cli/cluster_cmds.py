"""``fmq cluster status``: every broker group of a cluster, its primary, its topics and
queues and the consumer groups' lag there, in one table (docs/cluster.md)."""

from __future__ import annotations

import click
from fmq.cli import output as out
from fmq.cli.common import emit, fmq_errors, json_option
from fmq.cli.route_place import cluster_status, place_options

STATUS_COLUMNS: list[out.Column] = [
    ("GROUP", lambda r: r["group"]),
    ("PRIMARY", lambda r: r["primary"]),
    ("EPOCH", lambda r: r["epoch"]),
    ("WRITES", lambda r: r["writes"]),
    ("TOPIC", lambda r: r["topic"]),
    ("QUEUES", lambda r: r["queues"]),
    ("GLOBAL INDICES", lambda r: r["indices"]),
    ("PERMISSION", lambda r: r["permission"]),
    ("LAG", lambda r: r["lag"]),
]


def _lag_cell(status: dict, group: dict, topic: str) -> str | None:
    if not group["reachable"]:
        return "unknown"
    per_consumer: dict[str, int] = {}
    for row in status["lag"]:
        if row["group"] == group["group"] and row["topic"] == topic:
            per_consumer[row["consumer_group"]] = (per_consumer.get(row["consumer_group"], 0)
                                                   + row["lag"])
    return ", ".join(f"{c} {out.count(n)}" for c, n in sorted(per_consumer.items())) or None


def status_rows(status: dict) -> list[dict]:
    """One row per broker group and topic it holds queues of (a group without topics: one
    row of its own)."""
    rows = []
    for g in status["groups"]:
        writes = "open" if g["open_for_writes"] else "closed"
        base = {"group": g["group"], "epoch": g["epoch"] or None,
                "primary": (g["primary"] or "none") + ("" if g["reachable"] or not g["primary"]
                                                      else " (no answer)"),
                "writes": writes, "topic": None, "queues": None, "indices": None,
                "permission": None, "lag": None}
        held = [(r["topic"], e) for r in status["routes"] for e in r["groups"]
                if e["group"] == g["group"]]
        rows += [{**base, "topic": topic, "queues": e["queues"],
                  "indices": f"{e['base']}..{e['last_index']}",
                  "permission": "read-write" if e["permission"] == "rw" else "read-only",
                  "lag": _lag_cell(status, g, topic)} for topic, e in held] or [base]
    return rows


def render_status(status: dict) -> str:
    head = (f"cluster {status['cluster']}: {out.plural(len(status['groups']), 'broker group')}, "
            f"{out.plural(len(status['routes']), 'routed topic')}")
    text = head + "\n" + out.table(status_rows(status), STATUS_COLUMNS, "no broker groups")
    errors = [f"  {g['group']}: {g['error']}" for g in status["groups"]
              if g["primary"] and not g["reachable"]]
    if errors:
        text += "\n\nprimaries that did not answer (their lag is unknown):\n" + "\n".join(errors)
    for topic, why in sorted(status["damaged"].items()):
        text += f"\n\ntopic {topic}: its stored route cannot be read: {why}"
    return text


@click.group("cluster")
def cluster_group() -> None:
    """A cluster of broker groups sharing one etcd (docs/cluster.md)."""


@cluster_group.command("status")
@place_options
@json_option
@fmq_errors
def status(server: str | None, coordinator: str | None, cluster_name: str,
           as_json: bool) -> None:
    """Every broker group (its primary, epoch, whether it takes writes), the topics it
    holds queues of (count, global indices, read-write or read-only) and each consumer
    group's lag there, as the group's primary reports it."""
    data = cluster_status(server, coordinator, cluster_name)
    emit(data, as_json, render_status(data))


def register(cli: click.Group) -> None:
    cli.add_command(cluster_group)
