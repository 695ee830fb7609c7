"""The security document: every user's credential and every access rule, as one value.

A node keeps it in ``DATA_DIR/security.json`` (:class:`fmq.security.users.UserStore`); a
cluster keeps it in etcd (:mod:`fmq.coordination.cluster_security`) and every node keeps a
copy in its file. The document is immutable: a change makes a new one, so whoever stores it
(a file replaced whole, a compare-and-swap in etcd) stores one version or the next, never a
mix, and the same checks apply wherever it is kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from fmq.errors import ConfigError, InvalidArgument
from fmq.security.acl import Rule
from fmq.security.credentials import ITERATIONS, StoredCredential, check_user_name

FORMAT_VERSION = 1


@dataclass(frozen=True)
class SecurityDocument:
    """Users (name → credential) and access rules, in the order they were added."""

    users: Mapping[str, StoredCredential] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "users", MappingProxyType(dict(self.users)))
        object.__setattr__(self, "rules", tuple(self.rules))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, SecurityDocument) and dict(self.users) == dict(other.users)
                and self.rules == other.rules)

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.users)), self.rules))

    # ------------------------------------------------------------------ form

    def to_json(self) -> dict:
        return {"version": FORMAT_VERSION,
                "users": {u: c.to_json() for u, c in sorted(self.users.items())},
                "rules": [r.to_json() for r in self.rules]}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, data: object, where: str, remedy: str) -> SecurityDocument:
        """The document ``data`` (parsed JSON) read from ``where``; a ConfigError naming
        ``where`` and saying ``remedy`` when it is not one."""
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise ConfigError(f"{where} is not an FMQ security document of version "
                              f"{FORMAT_VERSION}; {remedy}")
        try:
            users = {u: StoredCredential.from_json(c) for u, c in data["users"].items()}
            rules = [Rule.from_json(r) for r in data.get("rules", [])]
        except (KeyError, TypeError, ValueError, AttributeError, InvalidArgument) as exc:
            raise ConfigError(f"{where} is damaged ({exc!r}); {remedy}") from None
        return cls(users, tuple(rules))

    @classmethod
    def loads(cls, text: str | bytes, where: str, remedy: str) -> SecurityDocument:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{where} is not JSON ({exc}); {remedy}") from None
        return cls.from_json(data, where, remedy)

    # ------------------------------------------------------------------ changes

    def with_user(self, user: str, credential: StoredCredential, *,
                  create: bool) -> SecurityDocument:
        """Add ``user`` (``create``: it must not exist) or change its password (it must)."""
        check_user_name(user)
        if credential.iterations < ITERATIONS or not credential.salt:
            raise InvalidArgument(f"a credential needs a salt and at least {ITERATIONS} "
                                  f"iterations")
        if create and user in self.users:
            raise InvalidArgument(f"user {user!r} exists already; change its password "
                                  f"with `fmq user passwd`")
        if not create and user not in self.users:
            raise InvalidArgument(f"no user {user!r}; add it with `fmq user add`")
        return SecurityDocument({**self.users, user: credential}, self.rules)

    def without_user(self, user: str, *, allow_last: bool = True) -> SecurityDocument:
        """Remove ``user``; unless ``allow_last``, refuse to remove the last one (a server
        without users lets anyone do anything)."""
        if user not in self.users:
            raise InvalidArgument(f"no user {user!r} (`fmq user list` shows them)")
        if not allow_last and list(self.users) == [user]:
            raise InvalidArgument(
                f"{user!r} is the last user: without users the server would let anyone do "
                f"anything; add another user first, or remove it offline on the stopped "
                f"broker")
        return SecurityDocument({u: c for u, c in self.users.items() if u != user},
                                self.rules)

    def with_rule(self, rule: Rule) -> SecurityDocument:
        """The document with ``rule`` added (this one when it is there already)."""
        if rule in self.rules:
            return self
        return SecurityDocument(self.users, (*self.rules, rule))

    def without_rule(self, rule: Rule) -> SecurityDocument:
        if rule not in self.rules:
            raise InvalidArgument(f"no such rule ({rule.text()}); `fmq acl list` shows them")
        return SecurityDocument(self.users, tuple(r for r in self.rules if r != rule))


class RuleAddition:
    """A document change that adds ``rule`` and remembers whether it was new: a
    compare-and-swap may apply a change to several documents in turn, and only the one it
    was applied to last (the one stored) says whether the rule was there already."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.added = False

    def __call__(self, document: SecurityDocument) -> SecurityDocument:
        self.added = self.rule not in document.rules
        return document.with_rule(self.rule)
