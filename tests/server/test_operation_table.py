"""One declaration per operation (fmq/server/ops/operation.py): every opcode of the protocol
is declared exactly once, beside its handler, with every fact the server checks; the table
is gathered from the modules fmq/server/ops/table.py lists, not from whatever happened to
be imported."""

from __future__ import annotations

import ast
import os
import types

import pytest

from fmq.protocol import SCHEMA, Op
from fmq.server.ops import operation as declaring
from fmq.server.ops.operation import (
    HANDSHAKE,
    SERVES,
    Access,
    FmqOperation,
    Follower,
    Hosted,
    operation,
)
from fmq.server.ops.table import OPERATION_MODULES, OPERATIONS, gather

SERVER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "fmq", "server")


def test_every_opcode_of_the_protocol_is_declared():
    assert set(OPERATIONS) == set(Op) == set(SCHEMA)
    for op, declared in OPERATIONS.items():
        assert declared.op == op


def test_every_declaration_gives_every_fact():
    for declared in OPERATIONS.values():
        assert isinstance(declared, FmqOperation)
        assert callable(declared.handler)
        assert isinstance(declared.access, Access), declared.op.name
        assert declared.hosted is None or isinstance(declared.hosted, Hosted), declared.op.name
        assert isinstance(declared.follower, Follower), declared.op.name


def test_a_declaration_cannot_leave_a_fact_out():
    with pytest.raises(TypeError):
        operation(Op.PING, access=HANDSHAKE, hosted=None)  # no follower=
    with pytest.raises(TypeError):
        operation(Op.PING, hosted=None, follower=SERVES)  # no access=


def _declares(source: str) -> list[str]:
    """The operations a module's source declares, read from its decorators."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for deco in node.decorator_list:
                if (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Name)
                        and deco.func.id == "operation"):
                    found.append(ast.unparse(deco.args[0]))
    return found


def test_every_module_declaring_operations_is_listed_in_the_table():
    listed = {m.__name__ for m in OPERATION_MODULES}
    declaring_modules = {}
    for dirpath, _, files in os.walk(SERVER):
        if os.path.basename(dirpath) == "kafka":
            continue  # the Kafka door's APIs have their own table (kafka/apis.py)
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                ops = _declares(f.read())
            if ops:
                rel = os.path.relpath(path[:-3], os.path.dirname(os.path.dirname(SERVER)))
                declaring_modules[rel.replace(os.sep, ".")] = ops
    assert set(declaring_modules) == listed
    assert sum(len(ops) for ops in declaring_modules.values()) == len(OPERATIONS)


def test_an_opcode_declared_twice_is_refused():
    twice = types.ModuleType("twice")

    @operation(Op.PING, access=HANDSHAKE, hosted=None, follower=SERVES)
    async def first(ctx, session, req):  # noqa: ANN001, ANN202
        return {}

    @operation(Op.PING, access=HANDSHAKE, hosted=None, follower=SERVES)
    async def second(ctx, session, req):  # noqa: ANN001, ANN202
        return {}

    for fn in (first, second):
        fn.__module__ = "twice"
        setattr(twice, fn.__name__, fn)
    with pytest.raises(RuntimeError, match="PING is declared twice"):
        gather([twice])


def test_a_handler_imported_into_another_module_counts_once():
    # handlers' declarations seen through a module that imports one of them
    alias = types.ModuleType("alias")
    alias.ping = OPERATIONS[Op.PING].handler
    assert gather([alias]) == {}
    assert declaring.declaration_of(alias.ping) is OPERATIONS[Op.PING]
