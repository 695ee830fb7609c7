"""The server's modules import each other in one direction only: session -> handlers ->
context, the server on top; the wire values and error rebuilding need nothing of it."""

from __future__ import annotations

import ast
import pathlib

import fmq.server
from fmq.protocol import Op
from fmq.server.handlers import HANDLERS

SERVER_DIR = pathlib.Path(fmq.server.__file__).parent


def fmq_imports(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fmq"):
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("fmq"))
    return names


def server_graph() -> dict[str, set[str]]:
    modules = {f"fmq.server.{p.stem}": p for p in SERVER_DIR.glob("*.py")
               if p.stem != "__init__"}
    return {name: {m for m in fmq_imports(path) if m in modules}
            for name, path in modules.items()}


def test_the_server_modules_have_no_import_cycle():
    graph = server_graph()
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        for dep in graph[name]:
            visit(dep, (*path, name))
        done.add(name)

    for name in graph:
        visit(name, ())


def test_handlers_and_sessions_never_import_the_server():
    graph = server_graph()
    assert "fmq.server.server" not in graph["fmq.server.session"]
    assert "fmq.server.server" not in graph["fmq.server.handlers"]
    assert {"fmq.server.session", "fmq.server.server"}.isdisjoint(graph["fmq.server.context"])


def test_every_operation_is_in_the_handler_table():
    assert set(HANDLERS) == set(Op)
