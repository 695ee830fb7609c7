"""A routed topic seen from one node of its cluster (``fmq topic describe`` and ``list``):
the node's group's part in the route, and the queues of every group of the route, each
group's asked of its primary (docs/cluster.md)."""

from __future__ import annotations

import json

from fmq.cli import output as out
from fmq.cli.client_options import client_kwargs


def route_here_text(here: dict) -> str:
    """This node's group's part in the topic's route, for people."""
    if not here["in_route"]:
        return (f"{here['group']}, no longer in the topic's route (remove-group): nothing "
                f"new arrives here; what is stored stays readable until retention")
    last = here["base"] + here["queues"] - 1
    access = "" if here["permission"] == "rw" else ", read-only (drained)"
    return f"{here['group']}, the route's queues {here['base']}..{last}{access}"


def _route_cell(t: dict) -> str | None:
    here = t.get("route_here")
    if here is None:
        return None
    if not here["in_route"]:
        return f"{here['group']}: removed"
    last = here["base"] + here["queues"] - 1
    return f"{here['group']}: {here['base']}..{last}" + (
        "" if here["permission"] == "rw" else " read-only")


def route_queues(client, name: str) -> dict | None:
    """A routed topic's queues in every broker group of its route, each group's asked of
    its primary: ``{"cluster", "version", "queues": [...]}`` (a group whose primary could
    not be asked is one row with its ``error``); None outside a cluster, for a topic
    without a route, or when the routes may not be read."""
    from fmq.client import Client
    from fmq.errors import FMQError
    from fmq.protocol import Op

    try:  # ROUTE "" reads the node's copy; ROUTE TOPIC would create a missing route
        view = json.loads(client.call(Op.ROUTE, {"topic": ""})["json"])
    except FMQError:
        return None
    route = view.get("routes", {}).get(name)
    if not route or not view.get("cluster"):
        return None
    rows: list[dict] = []
    for g in route["groups"]:
        try:
            with Client(g["primary"], retries=1, node="any", **client_kwargs()) as c:
                ranges = c.describe_topic(name)["queue_ranges"][:g["queues"]]
        except FMQError as exc:
            rows.append({"group": g["group"], "error": str(exc)})
            continue
        rows += [{"group": g["group"], "queue_id": g["base"] + q["queue_id"],
                  "group_queue": q["queue_id"], "min_offset": q["min_offset"],
                  "next_offset": q["next_offset"]} for q in ranges]
    return {"cluster": view["cluster"], "version": route["version"], "queues": rows}


def render_route_queues(route: dict) -> str:
    head = (f"queues of every broker group of its route (cluster {route['cluster']}, "
            f"route version {route['version']}):")
    table = out.table(route["queues"], [
        ("GROUP", lambda q: q["group"]), ("QUEUE", lambda q: q.get("queue_id")),
        ("GROUP QUEUE", lambda q: q.get("group_queue")),
        ("MIN OFFSET", lambda q: q.get("min_offset")),
        ("NEXT OFFSET", lambda q: q.get("next_offset")),
        ("MESSAGES", lambda q: q["next_offset"] - q["min_offset"] if "error" not in q
         else f"unknown: {q['error']}")])
    return head + "\n" + table


#: On a node of a cluster: its group's part in each topic's route.
ROUTE_COLUMN: out.Column = ("BROKER GROUP", _route_cell)
