"""Errors of TLS, log-in and access rules."""

from __future__ import annotations

from fmq.errors.base import FMQError


class SecurityError(FMQError):
    """Base class of TLS, authentication and authorisation errors (not retriable: the
    same request fails the same way until the configuration changes; UsersNotLoaded alone
    passes by itself)."""

    code = 70


class TLSFailed(SecurityError):
    """The TLS handshake failed: a certificate not trusted, a host name that does not
    match, or one side speaking TLS and the other not (docs/security.md)."""

    code = 71


class AuthenticationFailed(SecurityError):
    """Wrong user name or password, or a malformed SCRAM exchange."""

    code = 72


class AuthenticationRequired(SecurityError):
    """The server has users: a connection must authenticate before anything else."""

    code = 73


class UsersNotLoaded(AuthenticationRequired):
    """A node whose users live in etcd has read neither them nor a copy of them yet (a
    fresh node, etcd not answering): it refuses every request but the handshake, log-ins
    included, until it has. Retriable: the same request, after a log-in when the cluster
    has users, succeeds once the node has read them (docs/security.md)."""

    code = 76
    retriable = True


class AccessDenied(SecurityError):
    """No rule allows this user the operation on the resource, or a rule denies it."""

    code = 74
    fields = {"operation": str, "resource": str}
    message_format = (
        "access denied: {operation} on {resource} is not allowed for this user; an "
        "administrator can allow it with `fmq acl add` (docs/security.md)")

    def __init__(self, operation: str, resource: str) -> None:
        super().__init__(self.message_format.format(operation=operation, resource=resource))
        self.operation = operation
        self.resource = resource


class DeniedByRule(AccessDenied):
    """A deny rule matched the request: an allow rule cannot help (deny wins); the rule
    must be removed."""

    code = 75
    fields = {"operation": str, "resource": str, "rule": str}
    message_format = (
        "access denied: {operation} on {resource} is refused by the rule [{rule}]; a deny "
        "rule beats every allow, so an administrator must remove it (`fmq acl remove`) to "
        "allow this (docs/security.md)")

    def __init__(self, operation: str, resource: str, rule: str) -> None:
        SecurityError.__init__(self, self.message_format.format(
            operation=operation, resource=resource, rule=rule))
        self.operation = operation
        self.resource = resource
        self.rule = rule
