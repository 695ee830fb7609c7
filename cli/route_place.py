"""Where the cluster commands (``fmq topic create --queues-per-group``, ``expand``,
``drain``, ``reopen``, ``remove-group``, ``fmq cluster status``) act: the cluster's etcd
itself (``--coordinator``, ``--cluster-name``) or any node of the cluster (``--server``,
which sends ROUTE_CHANGE or ROUTE). Exactly one of the two; the TLS and log-in options are
the caller's, for the node and for the primaries asked for their consumer groups' lag."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click
from fmq.cli import output as out
from fmq.cli.client_options import client_kwargs, security_options

coordinator_option = click.option(
    "--coordinator", default=None, metavar="etcd://HOST:PORT",
    help="Change the cluster's routes in this etcd directly (instead of --server).")
cluster_name_option = click.option(
    "--cluster-name", default="fmq", show_default=True,
    help="The cluster (its nodes' server.cluster) whose routes --coordinator means.")
server_option = click.option(
    "--server", default=None, envvar="FMQ_SERVER", metavar="HOST:PORT",
    help="Any node of the cluster, which makes the change in etcd (instead of "
         "--coordinator); env FMQ_SERVER.")


def place_options(fn: Callable) -> Callable:
    """``--coordinator``, ``--cluster-name``, ``--server`` and the TLS and log-in options."""
    return security_options(server_option(coordinator_option(cluster_name_option(fn))))


def check_place(server: str | None, coordinator: str | None) -> None:
    if (server is None) == (coordinator is None):
        raise click.UsageError("give exactly one of --coordinator etcd://HOST:PORT (the "
                               "cluster's etcd) or --server HOST:PORT (any node of the "
                               "cluster)" + (", not both" if server else ""))


def _admin(coordinator: str, cluster_name: str) -> Any:
    from fmq.coordination.cluster_admin import ClusterAdmin, network_offsets
    from fmq.coordination.routes import ClusterRoutes

    return ClusterAdmin(ClusterRoutes(coordinator, cluster_name),
                        network_offsets(client_kwargs()))


def _call(server: str, op_name: str, fields: dict) -> dict:
    from fmq.client import Client
    from fmq.protocol import Op

    with Client(server, retries=1, node="any", **client_kwargs()) as client:
        return json.loads(client.call(Op[op_name], fields)["json"])


def change_route(request: dict, server: str | None, coordinator: str | None,
                 cluster_name: str) -> dict:
    """Run the route change ``request`` (ROUTE_CHANGE's layout) at the place given; the new
    route as ROUTE answers it."""
    check_place(server, coordinator)
    if coordinator is not None:
        from fmq.coordination.cluster_admin import apply_change

        admin = _admin(coordinator, cluster_name)
        return admin.answer(apply_change(admin, request))
    return _call(server, "ROUTE_CHANGE", {"json": json.dumps(request)})


def cluster_status(server: str | None, coordinator: str | None, cluster_name: str) -> dict:
    """``fmq cluster status``'s data (:func:`fmq.coordination.cluster_status.cluster_status`)."""
    from fmq.coordination.cluster_admin import network_offsets
    from fmq.coordination.cluster_status import cluster_status as status
    from fmq.coordination.cluster_status import view_from_routes

    check_place(server, coordinator)
    if coordinator is not None:
        from fmq.coordination.routes import ClusterRoutes

        view = view_from_routes(ClusterRoutes(coordinator, cluster_name))
    else:
        view = _call(server, "ROUTE", {"topic": ""})
    return status(view, network_offsets(client_kwargs()))


ROUTE_COLUMNS: list[out.Column] = [
    ("GROUP", lambda e: e["group"]),
    ("QUEUES", lambda e: e["queues"]),
    ("GLOBAL INDICES", lambda e: f"{e['base']}..{e['base'] + e['queues'] - 1}"),
    ("PERMISSION", lambda e: "read-write" if e["permission"] == "rw" else "read-only"),
    ("PRIMARY", lambda e: e["primary"] or None),
]


def render_route(route: dict) -> str:
    """A route as ROUTE answers it, for people."""
    head = (f"topic {route['topic']} in cluster {route['cluster']}, route version "
            f"{route['version']}")
    return head + "\n" + out.table(route["groups"], ROUTE_COLUMNS)
