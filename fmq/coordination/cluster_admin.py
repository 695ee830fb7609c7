"""An operator's changes to a cluster's topic routes (docs/cluster.md): create, expand,
drain, reopen and remove-group, written to etcd by compare-and-swap. One path for both ways
in: ``fmq topic ... --coordinator`` runs it in the command, a node's ROUTE_CHANGE runs it on
the client's behalf (:func:`apply_change` takes the request as ROUTE_CHANGE carries it).

remove-group asks the primaries of every group of the route (GROUPS) how far every consumer
group has read: a consumer group that committed in any queue of the topic, in any group, must
have read all of the removed group's queues of it (:mod:`fmq.coordination.route_lag`). The route is
changed only when nothing there is left unread, or with ``force``. A primary that cannot be
asked leaves the lag unknown, which refuses the change too (unless forced): a removal must
never hide messages nobody has read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from fmq.client import Client
from fmq.coordination.route_lag import GroupsAnswer, groups_answer, route_lag
from fmq.coordination.routes import ClusterRoutes
from fmq.errors import (
    FMQError,
    InvalidArgument,
    RouteConflict,
    RouteHasLag,
    UnknownBrokerGroup,
    UnknownTopic,
)
from fmq.protocol import Op
from fmq.topic_route import (
    BrokerGroup,
    TopicRoute,
    check_group_name,
    check_queue_count,
    check_routable_topic,
    drain,
    remove_group,
    reopen,
    route_answer,
)

#: Reads the committed offsets of every consumer group and the queue ranges from a broker
#: group's primary (its GROUPS answer). Raises FMQError or OSError when the primary cannot
#: be asked.
OffsetReader = Callable[[BrokerGroup], GroupsAnswer]

ACTIONS = ("create", "expand", "drain", "reopen", "remove-group")
#: Seconds a primary gets to answer GROUPS (connect and request each).
ASK_TIMEOUT_S = 5.0


def network_offsets(client_options: Mapping[str, Any] | None = None,
                    timeout_s: float = ASK_TIMEOUT_S) -> OffsetReader:
    """An :data:`OffsetReader` asking the primary over the network with ``client_options``
    (TLS, user, password file: the caller's own)."""
    options = dict(client_options or {})

    def read(group: BrokerGroup) -> GroupsAnswer:
        with Client(group.primary, retries=1, node="any", connect_timeout=timeout_s,
                    request_timeout=timeout_s, **options) as client:
            answer = json.loads(client.call(Op.GROUPS, {"group": None})["json"])
        return groups_answer(answer)

    return read


def lag_text(lagging: Mapping[tuple[str, int], int]) -> str:
    """``consumer group billing queue 0: 3 unread, ...`` in order."""
    return ", ".join(f"consumer group {g} queue {q}: {n} unread"
                     for (g, q), n in sorted(lagging.items()))


class ClusterAdmin:
    """The route changes of one cluster. ``read_offsets`` asks a group's primary for its
    consumer groups' offsets (default: over the network, without TLS or log-in)."""

    def __init__(self, routes: ClusterRoutes, read_offsets: OffsetReader | None = None) -> None:
        self.routes = routes
        self.read_offsets = read_offsets or network_offsets()

    @property
    def cluster(self) -> str:
        return self.routes.cluster

    def answer(self, route: TopicRoute) -> dict:
        """``route`` as ROUTE answers it, with the groups' primaries as etcd has them now."""
        return route_answer(self.cluster, route, self.routes.groups())

    # ------------------------------------------------------------------ changes

    def create(self, topic: str, queues_per_group: int,
               groups: list[str] | None = None) -> TopicRoute:
        """``topic``'s first route: ``queues_per_group`` queues in each of ``groups``, or in
        every group that takes writes now (never silently in one)."""
        check_routable_topic(topic)
        check_queue_count(queues_per_group)
        if groups is not None:
            for g in groups:
                check_group_name(g)
        return self.routes.create(topic, queues_per_group, groups)

    def expand(self, topic: str, group: str, queues: int | None = None) -> TopicRoute:
        """``group`` added to ``topic``'s route with ``queues`` queues (default: as many as
        the route's first group) at fresh global indices."""
        check_routable_topic(topic)
        check_group_name(group)
        if queues is not None:
            check_queue_count(queues)
        return self.routes.expand(topic, group, queues)

    def drain(self, topic: str, group: str) -> TopicRoute:
        """``group``'s queues of ``topic`` read-only: no new writes, consumers finish."""
        return self._change(topic, group, lambda r: drain(r, group))

    def reopen(self, topic: str, group: str) -> TopicRoute:
        """``group``'s queues of ``topic`` writable again."""
        return self._change(topic, group, lambda r: reopen(r, group))

    def remove_group(self, topic: str, group: str, force: bool = False) -> TopicRoute:
        """``group`` out of ``topic``'s route, refused (RouteHasLag) while a consumer group
        has unread messages in its queues there, or (RouteConflict) while that cannot be
        known, unless ``force``. Its messages stay in its log until its retention."""
        if force:
            return self._change(topic, group, lambda r: remove_group(r, group, {}, True))
        route = self._known_route(topic, group)
        remove_group(route, group, {})  # the route's own rules first: nothing to ask then
        lagging = self.lag(route, group)
        if lagging:
            raise RouteHasLag(topic, group, lag_text(lagging))

        def change(current: TopicRoute) -> TopicRoute:
            # Checked again on the route as it is when written: a change made meanwhile
            # (another queue count, the group reopened) gets its own refusal.
            entry = current.entry(group)
            if entry is not None and route.entry(group) != entry:
                raise RouteConflict(topic, f"its route changed while the lag of broker "
                                           f"group {group} was read; try again")
            return remove_group(current, group, {})

        return self._change(topic, group, change)

    def lag(self, route: TopicRoute, group: str) -> dict[tuple[str, int], int]:
        """(consumer group, queue id) -> messages not read yet, in ``group``'s queues of
        ``route``'s topic, by every consumer group subscribed to the topic in any group of
        the route, as their primaries report it now. RouteConflict when a primary cannot be
        asked (the lag is unknown: the removed group's, or who subscribes to the topic)."""
        assert route.entry(group) is not None
        known = self.routes.groups()
        answers = {}
        for name in sorted(route.groups, key=lambda n: n != group):  # the removed one first
            answers[name] = self._ask(route.topic, group, name, known.get(name))
        return {(r["consumer_group"], r["queue_id"]): r["lag"]
                for r in route_lag(route, answers) if r["group"] == group and r["lag"] > 0}

    def _ask(self, topic: str, removed: str, name: str, g: BrokerGroup | None) -> GroupsAnswer:
        """Broker group ``name``'s GROUPS answer, or RouteConflict saying what is unknown."""
        what = (f"the lag of its consumer groups in broker group {removed} is unknown"
                if name == removed else
                f"whether consumer groups that read it in broker group {name} have read "
                f"broker group {removed}'s queues is unknown")
        if g is None or not g.primary:
            raise RouteConflict(topic, f"{what}: broker group {name} has no primary now; "
                                       f"start one, or remove the group anyway with --force")
        try:
            return self.read_offsets(g)
        except (FMQError, OSError) as exc:
            raise RouteConflict(topic, f"{what}: the primary of broker group {name} at "
                                       f"{g.primary} did not answer ({exc}); start it, or "
                                       f"remove the group anyway with --force") from None

    def _known_route(self, topic: str, group: str) -> TopicRoute:
        check_routable_topic(topic)
        check_group_name(group)
        route = self.routes.get(topic)
        if route is None:
            raise UnknownTopic(topic)
        self._check_group(route, group)
        return route

    def _check_group(self, route: TopicRoute, group: str) -> None:
        """A group neither in the route nor in the cluster is a typo: say which groups
        the cluster has (a group in the route stays changeable after it left)."""
        if route.entry(group) is None:
            known = self.routes.groups()
            if group not in known:
                raise UnknownBrokerGroup(group, self.cluster,
                                         ", ".join(sorted(known)) or "none yet")

    def _change(self, topic: str, group: str,
                change: Callable[[TopicRoute], TopicRoute]) -> TopicRoute:
        check_routable_topic(topic)
        check_group_name(group)

        def checked(route: TopicRoute) -> TopicRoute:
            self._check_group(route, group)
            return change(route)

        return self.routes.change(topic, checked)


# ---------------------------------------------------------------------- ROUTE_CHANGE

_KINDS = {str: "a string", int: "an integer", bool: "true or false", list: "a list"}


def _field(request: Mapping[str, Any], name: str, kind: type,
           action: str, required: bool = True) -> Any:
    value = request.get(name)
    if value is None:
        if required:
            raise InvalidArgument(f"a route change {action!r} needs the field {name!r}")
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidArgument(f"field {name!r} of a route change must be {_KINDS[kind]}, "
                              f"not {value!r}")
    return value


def decode_change(text: str) -> dict[str, Any]:
    """ROUTE_CHANGE's JSON as a dict, or InvalidArgument saying what is wrong with it."""
    try:
        request = json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"a route change must be a JSON object ({exc})") from None
    if not isinstance(request, dict):
        raise InvalidArgument("a route change must be a JSON object, e.g. "
                              '{"action": "drain", "topic": "orders", "group": "g1"}')
    return request


def apply_change(admin: ClusterAdmin, request: Mapping[str, Any]) -> TopicRoute:
    """Run the route change ``request`` describes (ROUTE_CHANGE's layout, docs/protocol.md):
    ``action`` one of :data:`ACTIONS`, ``topic``; create: ``queues_per_group``, ``groups``
    (optional: every writable group); expand: ``group``, ``queues_per_group`` (optional: the
    first group's count); drain, reopen: ``group``; remove-group: ``group``, ``force``."""
    action = request.get("action")
    if not isinstance(action, str) or action not in ACTIONS:
        raise InvalidArgument(f"route change action {action!r} must be one of "
                              f"{', '.join(ACTIONS)}")
    topic = _field(request, "topic", str, action)
    if action == "create":
        groups = _field(request, "groups", list, action, required=False)
        if groups is not None and not all(isinstance(g, str) for g in groups):
            raise InvalidArgument(f"field 'groups' of a route change must be a list of "
                                  f"group names, not {groups!r}")
        return admin.create(topic, _field(request, "queues_per_group", int, action), groups)
    group = _field(request, "group", str, action)
    if action == "expand":
        return admin.expand(topic, group,
                            _field(request, "queues_per_group", int, action, required=False))
    if action == "drain":
        return admin.drain(topic, group)
    if action == "reopen":
        return admin.reopen(topic, group)
    force = _field(request, "force", bool, action, required=False) or False
    return admin.remove_group(topic, group, force)
