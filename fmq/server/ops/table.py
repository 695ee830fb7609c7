"""The table of FMQ operations the server runs: the declarations
(:func:`fmq.server.ops.operation.operation`) of the modules listed here, gathered once.

This list is the one place that says where operations are declared: importing a module
registers nothing, and a module missing here leaves its operations out of the table, which
``tests/server/test_operation_table.py`` catches (every opcode of the protocol declared
exactly once, and no declaration outside these modules).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import ModuleType

from fmq.protocol import Op
from fmq.server.ops import (
    delivery_ops,
    handlers,
    operator_ops,
    replication_ops,
    route_change_ops,
    route_ops,
    scope_decision_ops,
    security_ops,
    topic_ops,
)
from fmq.server.ops.operation import FmqOperation, declaration_of

#: Every module that declares operations.
OPERATION_MODULES: tuple[ModuleType, ...] = (
    handlers, delivery_ops, operator_ops, topic_ops, replication_ops, route_ops,
    route_change_ops, security_ops, scope_decision_ops)


def gather(modules: Iterable[ModuleType]) -> dict[int, FmqOperation]:
    """The declarations made in ``modules`` (a handler imported into another module counts
    where it is defined), by opcode; an opcode declared twice is a bug, found here."""
    table: dict[int, FmqOperation] = {}
    for module in modules:
        for value in vars(module).values():
            declared = declaration_of(value)
            if declared is None or value.__module__ != module.__name__:
                continue
            if declared.op in table:
                raise RuntimeError(f"operation {Op(declared.op).name} is declared twice: "
                                   f"{table[declared.op].handler.__qualname__} and "
                                   f"{value.__qualname__}")
            table[declared.op] = declared
    return table


#: The server's operations by opcode.
OPERATIONS: Mapping[int, FmqOperation] = gather(OPERATION_MODULES)
