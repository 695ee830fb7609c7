"""A cluster's broker groups and topic routes in etcd (docs/cluster.md).

Keys, under the cluster's prefix (the users' key, ``security``, sits beside them):

* ``/fmq-cluster/<cluster>/groups/<group>`` = ``{"open_for_writes": bool}``: the group is
  part of the cluster. Its primary is read from the group's own leader key
  (``/fmq/<group>/leader``, :mod:`fmq.coordination.lease`), whose layout is unchanged.
* ``/fmq-cluster/<cluster>/routes/<topic>`` = the route as JSON
  (:meth:`fmq.topic_route.TopicRoute.to_json`). The key's ``mod_revision`` is the route's
  version, and every change is a compare-and-swap on it: two administrators changing the
  same topic both land, one after the other, and nobody overwrites a change unseen.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fmq.coordination import etcd_io
from fmq.coordination.cluster_security import (
    CHANGE_ATTEMPTS,
    DEFAULT_CLUSTER,
    check_cluster_name,
)
from fmq.coordination.lease import leader_key
from fmq.errors import (
    ConfigError,
    CoordinatorUnavailable,
    InvalidArgument,
    RouteConflict,
    UnknownTopic,
)
from fmq.topic_route import (
    BrokerGroup,
    TopicRoute,
    check_group_name,
    check_routable_topic,
    check_route,
    drain,
    expand,
    new_route,
    remove_group,
    reopen,
)

logger = logging.getLogger("fmq.coordination")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text) if text else b""


def _prefix_end(prefix: str) -> str:
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def cluster_prefix(cluster: str) -> str:
    return f"/fmq-cluster/{cluster}/"


@dataclass(frozen=True)
class RouteSnapshot:
    """Every route and group of a cluster as etcd had them at ``revision``."""

    revision: int
    routes: dict[str, TopicRoute] = field(default_factory=dict)
    groups: dict[str, BrokerGroup] = field(default_factory=dict)
    #: Topics whose stored route could not be read, and why (a reader keeps its old copy).
    damaged: dict[str, str] = field(default_factory=dict)
    #: etcd's cluster id: revisions of another etcd (a new one, not a restored backup) are
    #: not comparable with these.
    etcd_id: str = ""


class ClusterRoutes:
    """The routes and broker groups of ``cluster`` in the etcd at ``coordinator``."""

    def __init__(self, coordinator: str, cluster: str = DEFAULT_CLUSTER, *,
                 request_timeout_s: float = 2.0) -> None:
        self._etcd = etcd_io.open_client(coordinator, request_timeout_s, "routes in etcd")
        self.coordinator, self.cluster = coordinator, check_cluster_name(cluster)
        self.prefix = cluster_prefix(cluster)
        self.routes_prefix, self.groups_prefix = self.prefix + "routes/", self.prefix + "groups/"

    def route_key(self, topic: str) -> str:
        return self.routes_prefix + topic

    def _call(self, what: str, request: Callable[[], Any]) -> Any:
        return etcd_io.call(self.coordinator, what, request)

    def _txn(self, what: str, txn: dict) -> dict:
        return self._call(what, lambda: self._etcd.transaction(txn))

    @staticmethod
    def _ranges(result: dict) -> list[list[tuple[str, bytes, int]]]:
        """(key, value, mod revision) of each range answer of a read-only transaction."""
        out = []
        for response in result.get("responses", []):
            kvs = response.get("response_range", {}).get("kvs", [])
            out.append([(_unb64(kv["key"]).decode(), _unb64(kv.get("value", "")),
                         int(kv.get("mod_revision", 0))) for kv in kvs])
        return out

    def _read(self, what: str, ranges: list[tuple[str, str | None]]) -> tuple[dict, list]:
        """etcd's header (revision, cluster id) and the rows of each (key, range end), read
        in one transaction, so they are one consistent view."""
        ops = [{"request_range": {"key": etcd_io.b64(key), **({"range_end": etcd_io.b64(end)} if end else {})}}
               for key, end in ranges]
        result = self._txn(what, {"compare": [], "success": ops, "failure": []})
        return result.get("header", {}), self._ranges(result)

    # ------------------------------------------------------------------ reading

    def get(self, topic: str) -> TopicRoute | None:
        """``topic``'s route with its version, or None when it has none."""
        check_routable_topic(topic)
        _header, (rows,) = self._read("read a route", [(self.route_key(topic), None)])
        if not rows:
            return None
        _key, value, revision = rows[0]
        return self._parse(topic, value, revision)

    def _parse(self, topic: str, value: bytes, revision: int) -> TopicRoute:
        try:
            route = TopicRoute.from_json(value, version=revision)
        except InvalidArgument as exc:
            raise ConfigError(f"etcd key {self.route_key(topic)} at {self.coordinator} holds "
                              f"no valid route ({exc}); write a good one back with "
                              f"ClusterRoutes.change or delete the key") from None
        if route.topic != topic:
            raise ConfigError(f"etcd key {self.route_key(topic)} holds the route of "
                              f"{route.topic!r}; delete the key and create the topic again")
        return route

    def snapshot(self) -> RouteSnapshot:
        """Every route and group at one etcd revision (the groups' primaries are read just
        after it: a primary is a hint a client checks with the group itself)."""
        header, (route_rows, group_rows) = self._read("read the cluster's routes", [
            (self.routes_prefix, _prefix_end(self.routes_prefix)),
            (self.groups_prefix, _prefix_end(self.groups_prefix))])
        routes, damaged = {}, {}
        for key, value, mod in route_rows:
            topic = key[len(self.routes_prefix):]
            try:
                routes[topic] = self._parse(topic, value, mod)
            except ConfigError as exc:
                damaged[topic] = str(exc)
        registered = {key[len(self.groups_prefix):]: value for key, value, _ in group_rows}
        return RouteSnapshot(int(header.get("revision", 0)), routes, self._groups(registered),
                             damaged, str(header.get("cluster_id", "")))

    def groups(self) -> dict[str, BrokerGroup]:
        """The cluster's broker groups with their primaries."""
        _header, (rows,) = self._read("read the cluster's groups", [
            (self.groups_prefix, _prefix_end(self.groups_prefix))])
        return self._groups({key[len(self.groups_prefix):]: value for key, value, _ in rows})

    def _groups(self, registered: Mapping[str, bytes]) -> dict[str, BrokerGroup]:
        names = sorted(registered)
        if not names:
            return {}
        _header, leaders = self._read("read the groups' leader keys",
                                   [(leader_key(name), None) for name in names])
        out = {}
        for name, rows in zip(names, leaders, strict=True):
            try:
                open_for_writes = bool(json.loads(registered[name]).get("open_for_writes", True))
                leader = json.loads(rows[0][1]) if rows else {}
                out[name] = BrokerGroup(name, str(leader.get("address", "")),
                                        int(leader.get("epoch", 0)), open_for_writes)
            except (ValueError, AttributeError, TypeError):
                logger.warning("broker group %s has a damaged registration or leader key in "
                               "%s; it is left out of the cluster's groups", name,
                               self.coordinator)
        return out

    # ------------------------------------------------------------------ groups

    def register_group(self, group: str, open_for_writes: bool = True) -> None:
        """Make ``group`` part of the cluster (kept as it is when it is already: an
        operator's ``open_for_writes`` stays)."""
        key = self.groups_prefix + check_group_name(group)
        value = json.dumps({"open_for_writes": open_for_writes})
        self._txn("register a broker group", {
            "compare": [{"key": etcd_io.b64(key), "target": "CREATE", "result": "EQUAL",
                         "create_revision": 0}],
            "success": [{"request_put": {"key": etcd_io.b64(key), "value": etcd_io.b64(value)}}],
            "failure": []})

    def announce_group(self, group: str) -> None:
        """Write ``group``'s registration again, unchanged (registering it when it is not):
        a new primary's address is in the group's leader key, outside the cluster's
        prefix, so this write is what makes every node's watch read the cluster again and
        learn it at once. An operator's change made meanwhile wins (it wakes them too)."""
        key = self.groups_prefix + check_group_name(group)
        _header, (rows,) = self._read("read a broker group", [(key, None)])
        if not rows:
            self.register_group(group)
            return
        _key, value, revision = rows[0]
        self._txn("announce a broker group's primary", {
            "compare": [{"key": etcd_io.b64(key), "target": "MOD", "result": "EQUAL",
                         "mod_revision": revision}],
            "success": [{"request_put": {"key": etcd_io.b64(key),
                                         "value": etcd_io.b64(value)}}],
            "failure": []})

    # ------------------------------------------------------------------ changes

    def _swap(self, route: TopicRoute, revision: int) -> int:
        """Store ``route`` if its key is still at ``revision`` (0: still absent); the new
        revision, or 0 when another writer got in first."""
        key = self.route_key(route.topic)
        check = ({"key": etcd_io.b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": revision}
                 if revision else
                 {"key": etcd_io.b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": 0})
        result = self._txn("change a route", {
            "compare": [check],
            "success": [{"request_put": {"key": etcd_io.b64(key), "value": etcd_io.b64(route.to_json())}}],
            "failure": []})
        return int(result["header"]["revision"]) if result.get("succeeded") else 0

    def create(self, topic: str, queues_per_group: int,
               groups: Iterable[str] | None = None) -> TopicRoute:
        """``topic``'s first route: ``queues_per_group`` queues in each of ``groups``, or in
        every group that takes writes now when none are named (never silently in one).
        Refused when the topic has a route already."""
        known = self.groups()
        if groups is None:
            groups = [name for name, g in sorted(known.items()) if g.writable]
            if not groups:
                raise RouteConflict(topic, f"no broker group of cluster {self.cluster} "
                                           f"takes writes now (none has a primary); start "
                                           f"one, or name the groups to create it in")
        route = new_route(topic, groups, queues_per_group, known, self.cluster)
        revision = self._swap(route, 0)
        if not revision:
            current = self.get(topic)
            raise RouteConflict(topic, f"it has a route already (version "
                                       f"{current.version if current else '?'}); change it "
                                       f"with expand, drain or remove-group")
        return TopicRoute(route.topic, route.entries, route.next_index, revision)

    def change(self, topic: str, change: Callable[[TopicRoute], TopicRoute]) -> TopicRoute:
        """Apply ``change`` to ``topic``'s route by compare-and-swap, read again and retried
        when another writer got in between; the route now stored. ``change`` may raise
        (the change does not fit the route): nothing is written then."""
        for _ in range(CHANGE_ATTEMPTS):
            current = self.get(topic)
            if current is None:
                raise UnknownTopic(topic)
            new = change(current)
            if new is current:
                return current
            check_route(new)
            revision = self._swap(new, current.version)
            if revision:
                return TopicRoute(new.topic, new.entries, new.next_index, revision)
        raise CoordinatorUnavailable(
            f"the route of topic {topic} changed {CHANGE_ATTEMPTS} times while this change "
            f"was being made; try again")

    def expand(self, topic: str, group: str, queues: int | None = None) -> TopicRoute:
        """Add ``group`` with ``queues`` queues (default: as many as the route's first
        group)."""
        known = self.groups()
        return self.change(topic, lambda r: expand(
            r, group, queues if queues is not None else r.entries[0].queues, known,
            self.cluster))

    def drain(self, topic: str, group: str) -> TopicRoute:
        return self.change(topic, lambda r: drain(r, group))

    def reopen(self, topic: str, group: str) -> TopicRoute:
        return self.change(topic, lambda r: reopen(r, group))

    def remove_group(self, topic: str, group: str, lag: Mapping[str, int],
                     force: bool = False) -> TopicRoute:
        """Remove ``group`` (``lag``: unread messages per consumer group in its queues)."""
        return self.change(topic, lambda r: remove_group(r, group, lag, force))

    def delete(self, topic: str, version: int = 0) -> bool:
        """Delete ``topic``'s route (only at ``version`` when given); whether it was."""
        key = etcd_io.b64(self.route_key(check_routable_topic(topic)))
        compare = ([{"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": version}]
                   if version else [])
        result = self._txn("delete a route", {
            "compare": compare, "success": [{"request_delete_range": {"key": key}}],
            "failure": []})
        responses = result.get("responses", []) if result.get("succeeded") else []
        return any(int(r.get("response_delete_range", {}).get("deleted", 0))
                   for r in responses)

    def wait_for_change(self, after_revision: int, timeout_s: float) -> None:
        """Return when a key of the cluster changes after ``after_revision``, after
        ``timeout_s`` without a byte from etcd, or at once when etcd cannot be asked. A
        watch stream can stop delivering without an error; the time-out bounds how long a
        change can go unseen."""
        etcd_io.wait_for_change(self._etcd, self.prefix, after_revision, timeout_s,
                                range_end=_prefix_end(self.prefix))
