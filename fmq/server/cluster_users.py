"""A node in a cluster takes its users and access rules from etcd (docs/security.md, *Users
and rules in a cluster*): the server's :class:`~fmq.server.authn.Authenticator` changes them
there, and a follower thread copies every change into ``security.json``, the node's start-up
cache."""

from __future__ import annotations

from fmq.coordination.cluster_security import ClusterSecurity, SecurityFollower
from fmq.server.authn import Authenticator
from fmq.server.config import ServerConfig


def follow_cluster_users(config: ServerConfig,
                         authenticator: Authenticator) -> SecurityFollower | None:
    """The follower of the cluster's users for a node with a coordinator (not started), or
    None for a node on its own, whose users stay in its data directory."""
    if not config.coordinator:
        return None
    cluster = ClusterSecurity(config.coordinator, config.cluster)
    authenticator.cluster = cluster
    return SecurityFollower(cluster, authenticator.store, authenticator.users_changed,
                            resync_s=config.security_resync_ms / 1000)
