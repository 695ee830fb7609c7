"""The import graph keeps the layer order that docs/design.md documents.

The order is read from the ```layers block of docs/design.md, so the document and this check
cannot drift apart: a new upward import, an import cycle, a client module that reaches into the
storage code fails CI here, with the offending import named.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Installed names of the source trees (cli/ lives at the root but is installed as fmq.cli).
TREES = {"fmq": "fmq", "cli": "fmq.cli"}


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module (or package)
    line: int


def module_files() -> dict[str, str]:
    """Every module of the project, by its import name."""
    out = {}
    for tree, package in TREES.items():
        for dirpath, _, files in os.walk(os.path.join(ROOT, tree)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), os.path.join(ROOT, tree))
                parts = rel[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                out[".".join([package, *parts])] = os.path.join(dirpath, name)
    return out


def imports_of(name: str, path: str, modules: dict[str, str]) -> list[Import]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # ``from fmq.index import keys`` imports the module fmq.index.keys
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module
                       for a in node.names]
        for target in targets:
            if target == "fmq" or target.startswith("fmq."):
                found.append(Import(name, target, node.lineno))
    return found


def documented_layers() -> tuple[list[list[str]], dict[str, set[str]]]:
    """The layers of docs/design.md (lowest first) and the packages held to an allow-list."""
    with open(os.path.join(ROOT, "docs", "design.md"), encoding="utf-8") as f:
        block = re.search(r"```layers\n(.*?)```", f.read(), flags=re.S)
    assert block, "docs/design.md has no ```layers block"
    layers, allowed = [], {}
    for line in block.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if " may import only " in line:
            who, _, what = line.partition(" may import only ")
            for package in who.split(","):
                allowed[package.strip()] = {w.strip() for w in what.split(",")}
        else:
            layers.append(line.split())
    return layers, allowed


def _owner(module: str, names: list[str]) -> str | None:
    """The longest listed name that is ``module`` or a package holding it."""
    hits = [n for n in names if module == n or module.startswith(n + ".")]
    return max(hits, key=len) if hits else None


MODULES = module_files()
IMPORTS = [i for name, path in sorted(MODULES.items()) for i in imports_of(name, path, MODULES)]
LAYERS, ALLOWED = documented_layers()
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}


def _rank(module: str) -> int:
    owner = _owner(module, list(RANK))
    assert owner is not None, (f"{module} is in no layer of docs/design.md: add its package "
                               f"to the ```layers block")
    return RANK[owner]


def test_every_module_is_in_a_documented_layer():
    for name in MODULES:
        _rank(name)


def upward(imports: list[Import]) -> list[str]:
    return [f"{i.source}:{i.line} imports {i.target}" for i in imports
            if _rank(i.target) > _rank(i.source)]


def test_no_module_imports_from_a_higher_layer():
    found = upward(IMPORTS)
    assert not found, "imports against the layer order of docs/design.md:\n" + "\n".join(found)


def test_client_side_packages_import_only_what_docs_design_allows():
    bad = []
    for i in IMPORTS:
        owner = _owner(i.source, list(ALLOWED))
        if owner and not _owner(i.target, sorted(ALLOWED[owner] | {owner})):
            bad.append(f"{i.source}:{i.line} imports {i.target}")
    assert not bad, "client-side imports outside their allow-list:\n" + "\n".join(bad)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module -> modules it imports), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> None:
        if node in path:
            raise _Cycle(path[path.index(node):] + [node])
        if node in done:
            return
        path.append(node)
        for nxt in sorted(graph[node]):
            visit(nxt)
        path.pop()
        done.add(node)

    try:
        for name in sorted(graph):
            visit(name)
    except _Cycle as found:
        return found.modules
    return None


class _Cycle(Exception):
    def __init__(self, modules: list[str]) -> None:
        self.modules = modules


def test_the_import_graph_has_no_cycle():
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for i in IMPORTS:
        # imports for type hints only count too: a cycle of them is still modules that
        # cannot be understood (or moved) one without the other
        if i.target in MODULES and i.target != i.source:
            graph[i.source].add(i.target)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_checks_catch_what_they_are_for():
    # An index module importing the broker, and a three-module circle.
    assert upward([Import("fmq.index.store", "fmq.engine.broker", 7)]) == [
        "fmq.index.store:7 imports fmq.engine.broker"]
    assert upward([Import("fmq.engine.broker", "fmq.index.store", 7)]) == []
    circle = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(circle) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
