"""``/users`` for administrators: the users and the access rules, and changing them as
``fmq user`` and ``fmq acl`` do over the wire (USER_PUT, USER_REMOVE, ACL_ADD, ACL_REMOVE;
ADMIN on the cluster, checked by the server). A new password never reaches the server nor
the confirmation page: the console makes its salted SCRAM credential at the first POST, as
the CLI does, and the confirmation carries that credential."""

from __future__ import annotations

import asyncio
import base64
import binascii

from aiohttp import web

from fmq.client.auth import make_user_fields
from fmq.console.confirm import ask, confirmed
from fmq.console.rendering import gateway_of, render, session_of
from fmq.errors import InvalidArgument
from fmq.protocol import Op
from fmq.security import Operation, ResourceType

routes = web.RouteTableDef()

CREDENTIAL = ("salt", "stored_key", "server_key")
RESOURCE_TYPES = [t.value for t in ResourceType]
OPERATIONS = [o.value for o in Operation]


@routes.get("/users")
async def users_page(request: web.Request) -> web.Response:
    gateway, session = gateway_of(request), session_of(request)
    if not gateway.has_users:
        return render(request, "users.html", users=None, rules=[],
                      resource_types=RESOURCE_TYPES, operations=OPERATIONS)
    users = (await gateway.call(session, Op.USER_LIST, {}))["users"]
    rules = (await gateway.call_json(session, Op.ACL_LIST, {}))["rules"]
    return render(request, "users.html", users=sorted(users), rules=rules,
                  resource_types=RESOURCE_TYPES, operations=OPERATIONS)


def _user(form) -> str:
    user = str(form.get("user", "")).strip()
    if not user:
        raise InvalidArgument("give the user's name")
    return user


async def _credential(form, user: str, create: bool) -> dict:
    """USER_PUT's fields: from the new password (made here, off the loop), or, confirmed,
    from the credential the confirmation page carried."""
    if not confirmed(form):
        password = str(form.get("password", ""))
        if password != str(form.get("again", "")):
            raise InvalidArgument("the two passwords differ: type the same one twice")
        return await asyncio.to_thread(make_user_fields, user, password, create)
    try:
        fields = {k: base64.b64decode(str(form.get(k, "")), validate=True)
                  for k in CREDENTIAL}
        iterations = int(str(form.get("iterations", "")))
    except (binascii.Error, ValueError):
        raise InvalidArgument("the confirmation's credential was damaged: set the password "
                              "again from /users") from None
    return {"user": user, "create": create, "iterations": iterations, **fields}


def _carried(fields: dict) -> dict[str, str]:
    return {"user": fields["user"], "iterations": str(fields["iterations"]),
            **{k: base64.b64encode(fields[k]).decode() for k in CREDENTIAL}}


@routes.post("/users/add")
async def add_user(request: web.Request) -> web.Response:
    return await _put_user(request, create=True)


@routes.post("/users/password")
async def change_password(request: web.Request) -> web.Response:
    return await _put_user(request, create=False)


async def _put_user(request: web.Request, create: bool) -> web.Response:
    form = await request.post()
    user = _user(form)
    fields = await _credential(form, user, create)
    action = "/users/add" if create else "/users/password"
    if not confirmed(form):
        what = (f"Add user {user} with the password given; she can log in at once and "
                f"may do what the rules allow her (nothing until a rule names her or '*')."
                if create else f"Change the password of user {user}; her sessions and "
                               f"connections stay logged in until they end.")
        return ask(request, f"{'Add' if create else 'Change'} user {user}", what, action,
                   "Add her" if create else "Change it", _carried(fields), "/users")
    await gateway_of(request).call(session_of(request), Op.USER_PUT, fields)
    return render(request, "done.html", title=f"User {user}",
                  said=f"User {user} {'added' if create else 'has a new password'}.",
                  changes=None, back="/users", back_label="Users and rules")


@routes.post("/users/remove")
async def remove_user(request: web.Request) -> web.Response:
    form = await request.post()
    user = _user(form)
    if not confirmed(form):
        return ask(request, f"Remove user {user}",
                   f"Remove user {user}: she can no longer log in; her rules stay until "
                   f"removed.", "/users/remove", "Remove her", {"user": user}, "/users")
    await gateway_of(request).call(session_of(request), Op.USER_REMOVE, {"user": user})
    return render(request, "done.html", title=f"User {user} removed",
                  said=f"User {user} removed.", changes=None, back="/users",
                  back_label="Users and rules")


def _rule(form) -> dict:
    principal = str(form.get("principal", "")).strip()
    kind = str(form.get("resource_type", ""))
    operation = str(form.get("operation", ""))
    if not principal:
        raise InvalidArgument("give the rule's principal: a user name, or '*' for everyone")
    if kind not in RESOURCE_TYPES:
        raise InvalidArgument(f"resource type must be one of {', '.join(RESOURCE_TYPES)}")
    if operation not in OPERATIONS:
        raise InvalidArgument(f"operation must be one of {', '.join(OPERATIONS)}")
    pattern = "cluster" if kind == "cluster" else str(form.get("pattern", ""))
    return {"principal": principal, "resource_type": kind, "pattern": pattern,
            "prefix": form.get("prefix") == "yes", "operation": operation,
            "allow": form.get("deny") != "yes"}


def rule_text(rule: dict) -> str:
    name = (f"names starting with {rule['pattern']!r}" if rule["prefix"]
            else repr(rule["pattern"]))
    return (f"{'allow' if rule['allow'] else 'deny'} {rule['principal']} "
            f"{rule['operation']} on {rule['resource_type']} {name}")


def _rule_fields(rule: dict) -> dict[str, str]:
    return {"principal": rule["principal"], "resource_type": rule["resource_type"],
            "pattern": rule["pattern"], "operation": rule["operation"],
            "prefix": "yes" if rule["prefix"] else "", "deny": "" if rule["allow"] else "yes"}


@routes.post("/rules/add")
async def add_rule(request: web.Request) -> web.Response:
    return await _change_rule(request, Op.ACL_ADD, "Add", "/rules/add")


@routes.post("/rules/remove")
async def remove_rule(request: web.Request) -> web.Response:
    return await _change_rule(request, Op.ACL_REMOVE, "Remove", "/rules/remove")


async def _change_rule(request: web.Request, op: Op, verb: str, action: str
                       ) -> web.Response:
    form = await request.post()
    rule = _rule(form)
    if not confirmed(form):
        return ask(request, f"{verb} a rule", f"{verb} the rule: {rule_text(rule)}. "
                   f"It applies to the next request of every connection and page.", action,
                   f"{verb} it", _rule_fields(rule), "/users")
    await gateway_of(request).call(session_of(request), op, rule)
    return render(request, "done.html", title=f"Rule {verb.lower()}{'d' if verb == 'Remove' else 'ed'}",
                  said=f"{'Added' if verb == 'Add' else 'Removed'}: {rule_text(rule)}.",
                  changes=None, back="/users#rules", back_label="Users and rules")
