"""Access rules: principal x resource (type and a literal or prefix pattern) x operation x
allow or deny. Deny wins; what no rule allows is denied (docs/security.md).

A rule's principal is a user name or ``*`` (every logged-in user); its operation may be
``all``. A prefix pattern matches every name that starts with it (the empty prefix matches
every name); the cluster resource has the one name ``cluster``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import Enum, StrEnum

from fmq.errors import InvalidArgument
from fmq.message import DLQ_PREFIX, RETRY_PREFIX


class ResourceType(StrEnum):
    TOPIC = "topic"
    GROUP = "group"  # a consumer group
    PRODUCER_GROUP = "producer-group"
    CLUSTER = "cluster"


class Operation(StrEnum):
    PRODUCE = "produce"  # send to a topic (also the topics of a prepared transaction)
    CONSUME = "consume"  # read a topic; join, leave, read the offsets of a consumer group
    COMMIT_OFFSETS = "commit-offsets"  # move a consumer group's committed offsets
    DESCRIBE = "describe"  # a topic's ranges and times, a group's state, the topic list
    TRANSACTION = "transaction"  # prepare/commit/rollback/check-back of a producer group
    ADMIN = "admin"  # tx resolve, offsets reset, stats, users and rules
    ALTER = "alter"  # create, alter, delete a topic (fmq topic)
    ALL = "all"  # any of the above (rules only)


CLUSTER_NAME = "cluster"
ANY_PRINCIPAL = "*"


def _choice(enum: type[Enum], value: str, what: str) -> Enum:
    try:
        return enum(value)
    except ValueError:
        raise InvalidArgument(f"{what} must be one of {', '.join(e.value for e in enum)}, "
                              f"not {value!r}") from None


@dataclass(frozen=True)
class Rule:
    principal: str
    resource_type: ResourceType
    pattern: str
    prefix: bool
    operation: Operation
    allow: bool

    @classmethod
    def make(cls, principal: str, resource_type: str, pattern: str, prefix: bool,
             operation: str, allow: bool) -> Rule:
        """A rule from text, checked (InvalidArgument saying what is wrong)."""
        if not principal:
            raise InvalidArgument("a rule needs a principal: a user name or '*'")
        rtype = _choice(ResourceType, resource_type, "the resource type")
        if rtype == ResourceType.CLUSTER:
            pattern, prefix = CLUSTER_NAME, False
        elif not pattern and not prefix:
            raise InvalidArgument("a literal rule needs a resource name; use a prefix rule "
                                  "with an empty prefix for every name")
        return cls(principal, rtype, pattern, bool(prefix),
                   _choice(Operation, operation, "the operation"), bool(allow))

    def matches(self, principal: str, operation: Operation, rtype: ResourceType,
                name: str) -> bool:
        return ((self.principal == principal or self.principal == ANY_PRINCIPAL)
                and self.resource_type == rtype
                and (self.operation == operation or self.operation == Operation.ALL)
                and (name.startswith(self.pattern) if self.prefix else name == self.pattern))

    def to_json(self) -> dict:
        d = asdict(self)
        d["resource_type"], d["operation"] = self.resource_type.value, self.operation.value
        return d

    @classmethod
    def from_json(cls, d: dict) -> Rule:
        return cls.make(d["principal"], d["resource_type"], d["pattern"], d["prefix"],
                        d["operation"], d["allow"])

    def text(self) -> str:
        where = (CLUSTER_NAME if self.resource_type == ResourceType.CLUSTER else
                 f"{self.resource_type.value} {self.pattern!r}{' (prefix)' if self.prefix else ''}")
        return (f"{'allow' if self.allow else 'deny'} {self.principal} "
                f"{self.operation.value} on {where}")


def allowed(rules: Iterable[Rule], principal: str, operation: Operation,
            rtype: ResourceType, name: str) -> bool:
    """Whether ``principal`` may do ``operation`` on the resource (see :func:`decide`)."""
    return decide(rules, principal, operation, rtype, name)[0]


#: The prefixes of a consumer group's own topics: its retries and its dead letters.
_GROUP_TOPIC_PREFIXES = (RETRY_PREFIX, DLQ_PREFIX)


def decide(rules: Iterable[Rule], principal: str, operation: Operation,
           rtype: ResourceType, name: str) -> tuple[bool, Rule | None]:
    """Whether ``principal`` may do ``operation`` on the resource, and the deny rule that
    refused it (None when it was refused because no rule allows it).

    A matching deny beats everything. Besides the rules that name the operation, two
    permissions follow from others, as a user would expect of them:

    * ``describe`` of a topic follows from ``consume``, ``produce`` or ``alter`` on it (a
      reader, writer or administrator of the topic may see its ranges, times and
      settings, as Kafka's READ, WRITE and ALTER imply DESCRIBE);
    * a consumer group's own retry and dead-letter topics (``%RETRY%G``, ``%DLQ%G``)
      follow from ``consume`` on the group ``G``: a member reads them as part of its group,
      and nobody could guess it needs a rule for them.
    """
    rules = list(rules)
    asked = [(operation, rtype, name)]
    if rtype == ResourceType.TOPIC:
        if operation == Operation.DESCRIBE:
            asked += [(Operation.CONSUME, rtype, name), (Operation.PRODUCE, rtype, name),
                      (Operation.ALTER, rtype, name)]
        group = _owning_group(name)
        if group is not None and operation in (Operation.CONSUME, Operation.DESCRIBE):
            asked.append((Operation.CONSUME, ResourceType.GROUP, group))
    for rule in rules:  # a deny of what was asked, as asked, always wins
        if not rule.allow and rule.matches(principal, operation, rtype, name):
            return False, rule
    if any(_by_rules(rules, principal, *need) for need in asked):
        return True, None
    return False, None


def _by_rules(rules: list[Rule], principal: str, operation: Operation,
              rtype: ResourceType, name: str) -> bool:
    """A matching allow and no matching deny."""
    verdict = False
    for rule in rules:
        if rule.matches(principal, operation, rtype, name):
            if not rule.allow:
                return False
            verdict = True
    return verdict


def _owning_group(topic: str) -> str | None:
    for prefix in _GROUP_TOPIC_PREFIXES:
        if topic.startswith(prefix) and len(topic) > len(prefix):
            return topic[len(prefix):]
    return None
