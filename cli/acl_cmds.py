"""``fmq acl add | remove | list``: access rules, on a stopped broker (DATA_DIR), a
running server (``--server``) or a whole cluster (``--coordinator``); docs/security.md has what each operation needs."""

from __future__ import annotations

import json
from collections.abc import Callable

import click
from fmq.cli.cluster_options import cluster_options, cluster_security, only_one_place
from fmq.cli.common import emit, fmq_errors, json_option, optional_data_dir_argument
from fmq.cli.tx_cmds import _choose_server, server_option
from fmq.cli.user_cmds import _offline, _online

from fmq.security.document import RuleAddition

OPERATIONS = ["produce", "consume", "commit-offsets", "describe", "transaction", "admin", "alter",
              "all"]


@click.group("acl")
def acl_group() -> None:
    """Access rules: principal x resource x operation x allow/deny (docs/security.md)."""


def rule_options(fn: Callable) -> Callable:
    for decorate in reversed([
        click.option("--principal", required=True, help="A user name, or '*' for every user."),
        click.option("--operation", required=True, type=click.Choice(OPERATIONS)),
        click.option("--topic", default=None, help="The rule is about this topic."),
        click.option("--group", default=None, help="... this consumer group."),
        click.option("--producer-group", default=None, help="... this producer group."),
        click.option("--cluster", is_flag=True, help="... the cluster (admin, describe)."),
        click.option("--prefix", is_flag=True,
                     help="The name is a prefix: every name starting with it (an empty "
                          "prefix: every name)."),
        click.option("--deny", is_flag=True, help="Deny instead of allow (deny wins)."),
    ]):
        fn = decorate(fn)
    return fn


def _rule_fields(principal: str, operation: str, topic: str | None, group: str | None,
                 producer_group: str | None, cluster: bool, prefix: bool, deny: bool) -> dict:
    given = [(kind, name) for kind, name in (("topic", topic), ("group", group),
                                             ("producer-group", producer_group))
             if name is not None] + ([("cluster", "cluster")] if cluster else [])
    if len(given) != 1:
        raise click.UsageError("name one resource: --topic, --group, --producer-group or "
                               "--cluster")
    kind, name = given[0]
    return {"principal": principal, "resource_type": kind, "pattern": name, "prefix": prefix,
            "operation": operation, "allow": not deny}


def _as_rule(fields: dict):
    from fmq.security import Rule

    return Rule.make(fields["principal"], fields["resource_type"], fields["pattern"] or "",
                     fields["prefix"], fields["operation"], fields["allow"])


@acl_group.command("add")
@optional_data_dir_argument
@server_option
@rule_options
@cluster_options
@fmq_errors
def add(data_dir: str | None, server: str | None, coordinator: str | None, cluster_name: str,
        **options) -> None:
    """Add a rule."""
    fields = _rule_fields(**options)
    rule = _as_rule(fields)  # checked here: a bad rule never reaches the server
    only_one_place(data_dir, server, coordinator)
    if coordinator is not None:
        addition = RuleAddition(rule)
        cluster_security(coordinator, cluster_name).change(addition)
        added = addition.added
    elif (server := _choose_server(data_dir, server)) is not None:
        added = _online(server, "ACL_ADD", fields)["added"]
    else:
        added = _offline(data_dir, lambda store: store.add_rule(rule))
    click.echo(f"{'added' if added else 'already there'}: {rule.text()}")


@acl_group.command("remove")
@optional_data_dir_argument
@server_option
@rule_options
@cluster_options
@fmq_errors
def remove(data_dir: str | None, server: str | None, coordinator: str | None,
           cluster_name: str, **options) -> None:
    """Remove a rule (give it exactly as it was added)."""
    fields = _rule_fields(**options)
    rule = _as_rule(fields)
    only_one_place(data_dir, server, coordinator)
    if coordinator is not None:
        cluster_security(coordinator, cluster_name).change(lambda d: d.without_rule(rule))
    elif (server := _choose_server(data_dir, server)) is not None:
        _online(server, "ACL_REMOVE", fields)
    else:
        _offline(data_dir, lambda store: store.remove_rule(rule))
    click.echo(f"removed: {rule.text()}")


@acl_group.command("list")
@optional_data_dir_argument
@server_option
@json_option
@cluster_options
@fmq_errors
def list_rules(data_dir: str | None, server: str | None, as_json: bool,
               coordinator: str | None, cluster_name: str) -> None:
    """Every rule."""
    from fmq.security import Rule

    only_one_place(data_dir, server, coordinator)
    if coordinator is not None:
        document = cluster_security(coordinator, cluster_name).read()[0]
        rules = list(document.rules) if document is not None else []
    elif (server := _choose_server(data_dir, server)) is not None:
        rules = [Rule.from_json(r) for r in
                 json.loads(_online(server, "ACL_LIST", {})["json"])["rules"]]
    else:
        rules = _offline(data_dir, lambda store: list(store.rules))
    for rule in rules:
        emit(rule.to_json(), as_json, rule.text())


def register(cli: click.Group) -> None:
    cli.add_command(acl_group)
