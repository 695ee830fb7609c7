"""``fmq user add | remove | list | passwd``: the users who may log in, on a stopped broker
(DATA_DIR), a running server (``--server``) or a whole cluster (``--coordinator``). New passwords are asked for twice without
echo, or read from ``--new-password-file`` or FMQ_NEW_PASSWORD (scripts)."""

from __future__ import annotations

import os
import sys

import click
from fmq.cli.client_options import client_kwargs
from fmq.cli.cluster_options import cluster_options, cluster_security, only_one_place
from fmq.cli.common import emit, fmq_errors, json_option, optional_data_dir_argument
from fmq.cli.tx_cmds import _choose_server, server_option


@click.group("user")
def user_group() -> None:
    """Users who may log in (SCRAM-SHA-256; docs/security.md)."""


def _new_password(password_file: str | None) -> str:
    if password_file:
        from fmq.client.auth import read_password_file

        return read_password_file(password_file)
    if os.environ.get("FMQ_NEW_PASSWORD"):
        return os.environ["FMQ_NEW_PASSWORD"]
    if not sys.stdin.isatty():  # getpass would echo, warn, then abort
        raise click.UsageError(
            "no terminal to ask for the new password on: give it in FMQ_NEW_PASSWORD or "
            "in a file with --new-password-file")
    return click.prompt("new password", hide_input=True, confirmation_prompt=True)


def _offline(data_dir: str, change) -> object:
    """Run ``change(store)`` on a stopped broker's users (the data directory's lock held)."""
    from fmq.datadir import DataDirLock
    from fmq.security import UserStore

    with DataDirLock(data_dir):
        return change(UserStore(data_dir))


def _online(server: str, op_name: str, fields: dict) -> dict:
    from fmq.client import Client
    from fmq.protocol import Op

    with Client(server, retries=1, **client_kwargs()) as client:
        return client.call(Op[op_name], fields)


new_password_option = click.option(
    "--new-password-file", type=click.Path(exists=True, dir_okay=False), default=None,
    help="File whose first line is the new password [default: FMQ_NEW_PASSWORD, else ask].")


def _put(user: str, create: bool, data_dir: str | None, server: str | None,
         password_file: str | None, coordinator: str | None, cluster_name: str) -> None:
    from fmq.client.auth import make_user_fields
    from fmq.security import StoredCredential

    only_one_place(data_dir, server, coordinator)
    fields = make_user_fields(user, _new_password(password_file), create)
    cred = StoredCredential(fields["salt"], fields["iterations"], fields["stored_key"],
                            fields["server_key"])
    if coordinator is not None:
        cluster_security(coordinator, cluster_name).change(
            lambda d: d.with_user(user, cred, create=create))
    elif (server := _choose_server(data_dir, server)) is not None:
        _online(server, "USER_PUT", fields)
    else:
        _offline(data_dir, lambda store: store.put_user(user, cred, create=create))
    click.echo(f"user {user!r} {'added' if create else 'has a new password'}")


@user_group.command("add")
@click.argument("user")
@optional_data_dir_argument
@server_option
@new_password_option
@cluster_options
@fmq_errors
def add(user: str, data_dir: str | None, server: str | None, new_password_file: str | None,
        coordinator: str | None, cluster_name: str) -> None:
    """Add USER with a new password."""
    _put(user, True, data_dir, server, new_password_file, coordinator, cluster_name)


@user_group.command("passwd")
@click.argument("user")
@optional_data_dir_argument
@server_option
@new_password_option
@cluster_options
@fmq_errors
def passwd(user: str, data_dir: str | None, server: str | None,
           new_password_file: str | None, coordinator: str | None, cluster_name: str) -> None:
    """Give USER a new password."""
    _put(user, False, data_dir, server, new_password_file, coordinator, cluster_name)


@user_group.command("remove")
@click.argument("user")
@optional_data_dir_argument
@server_option
@cluster_options
@fmq_errors
def remove(user: str, data_dir: str | None, server: str | None, coordinator: str | None,
           cluster_name: str) -> None:
    """Remove USER (its open connections stay logged in until they close)."""
    only_one_place(data_dir, server, coordinator)
    if coordinator is not None:
        cluster_security(coordinator, cluster_name).change(
            lambda d: d.without_user(user, allow_last=False))
    elif (server := _choose_server(data_dir, server)) is not None:
        _online(server, "USER_REMOVE", {"user": user})
    else:
        _offline(data_dir, lambda store: store.remove_user(user))
    click.echo(f"user {user!r} removed")


@user_group.command("list")
@optional_data_dir_argument
@server_option
@json_option
@cluster_options
@fmq_errors
def list_users(data_dir: str | None, server: str | None, as_json: bool,
               coordinator: str | None, cluster_name: str) -> None:
    """The users' names."""
    only_one_place(data_dir, server, coordinator)
    if coordinator is not None:
        document = cluster_security(coordinator, cluster_name).read()[0]
        users = sorted(document.users) if document is not None else []
    elif (server := _choose_server(data_dir, server)) is not None:
        users = _online(server, "USER_LIST", {})["users"]
    else:
        users = _offline(data_dir, lambda store: store.users())
    for name in users:
        emit({"user": name}, as_json, name)


def register(cli: click.Group) -> None:
    cli.add_command(user_group)
