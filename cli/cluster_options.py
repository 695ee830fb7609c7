"""Where `fmq user` and `fmq acl` make their change: a stopped broker's data directory, a
running server (--server), or every node of a cluster at once (--coordinator: the cluster's
users and rules in etcd, docs/security.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

coordinator_option = click.option(
    "--coordinator", default=None, metavar="etcd://HOST:PORT",
    help="Change the users and rules of a whole cluster in this etcd: every node with this "
         "coordinator copies them (instead of DATA_DIR or --server).")
cluster_name_option = click.option(
    "--cluster-name", default="fmq", show_default=True,
    help="The cluster (its nodes' server.cluster) whose users and rules --coordinator means.")


def cluster_options(fn: Callable) -> Callable:
    return coordinator_option(cluster_name_option(fn))


def only_one_place(data_dir: str | None, server: str | None, coordinator: str | None) -> None:
    if coordinator is not None and (data_dir is not None or server is not None):
        raise click.UsageError("give one of DATA_DIR (offline), --server HOST:PORT or "
                               "--coordinator etcd://HOST:PORT")


def cluster_security(coordinator: str, cluster_name: str) -> Any:
    from fmq.coordination.cluster_security import ClusterSecurity

    return ClusterSecurity(coordinator, cluster_name)
