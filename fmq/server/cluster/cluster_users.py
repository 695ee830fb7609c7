"""A node in a cluster takes its users and access rules from etcd (docs/security.md, *Users
and rules in a cluster*): the server's :class:`~fmq.server.authn.Authenticator` changes them
there, and a follower thread copies every change into ``security.json``, the node's start-up
cache. A node without that cache lets nobody in until the follower's first read (*Before a
node knows its users*): until then it cannot tell a cluster without users from one whose
users it has not seen."""

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
    if not authenticator.store.stored:
        authenticator.wait_for_cluster_users(cluster.where)
    return SecurityFollower(cluster, authenticator.store, authenticator.users_changed,
                            resync_s=config.security_resync_ms / 1000,
                            on_read=lambda: authenticator.cluster_users_read(cluster.where))
