"""The options every command that connects to a server shares beyond ``--server``: TLS
(``--tls``, ``--ca-file``, ``--cert``, ``--cert-key``) and the log-in (``--user``,
``--password-file``; the password itself only from a file or FMQ_PASSWORD). A command decorated with
:func:`security_options` passes :func:`client_kwargs` to the client it makes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

_META = "fmq.client_options"


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta.setdefault(_META, {})[param.name] = value
    return value


def _option(*decls: str, **attrs: Any) -> Callable[[Callable], Callable]:
    return click.option(*decls, expose_value=False, callback=_remember, **attrs)


def security_options(fn: Callable) -> Callable:
    """Add the TLS options to a command (their values reach :func:`client_kwargs`)."""
    pem = click.Path(exists=True, dir_okay=False)
    for decorate in reversed([
        _option("--tls", is_flag=True, envvar="FMQ_TLS",
                help="Connect with TLS (implied by --ca-file and --cert); env FMQ_TLS=1."),
        _option("--ca-file", type=pem, default=None, envvar="FMQ_CA_FILE",
                help="PEM file of the CA that signed the server's certificate [default: the "
                     "system's CAs]; env FMQ_CA_FILE."),
        _option("--cert", type=pem, default=None, envvar="FMQ_CERT",
                help="PEM client certificate, for a server that requires one (mutual TLS); "
                     "env FMQ_CERT."),
        _option("--cert-key", "key_file", type=pem, default=None, envvar="FMQ_CERT_KEY",
                help="PEM key of --cert (if not in the same file); env FMQ_CERT_KEY."),
        _option("--user", "login_user", default=None, envvar="FMQ_USER",
                help="Log in as this user (SCRAM-SHA-256); env FMQ_USER. The password comes "
                     "from FMQ_PASSWORD or --password-file."),
        _option("--password-file", type=pem, default=None, envvar="FMQ_PASSWORD_FILE",
                help="File whose first line is the password; env FMQ_PASSWORD_FILE."),
    ]):
        fn = decorate(fn)
    return fn


def client_kwargs() -> dict[str, Any]:
    """The keyword arguments of a client (:class:`fmq.client.Client`, ``Producer``, ...)
    for the options of the running command."""
    from fmq.client import TLSOptions

    given = click.get_current_context().meta.get(_META, {})
    kwargs: dict[str, Any] = {}
    if given.get("tls") or given.get("ca_file") or given.get("cert"):
        kwargs["tls"] = TLSOptions(ca_file=given.get("ca_file"), cert_file=given.get("cert"),
                                   key_file=given.get("key_file"))
    if given.get("login_user"):
        kwargs["user"] = given["login_user"]
    if given.get("password_file"):
        kwargs["password_file"] = given["password_file"]
    return kwargs
