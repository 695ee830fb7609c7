"""The wheel's package list (pyproject.toml's explicit ``packages``) names every package of
the tree: a subpackage missing there imports in a checkout but not from the wheel."""

from __future__ import annotations

import os
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tree_packages() -> set[str]:
    found = set()
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "fmq")):
        if "__init__.py" in files:
            found.add(os.path.relpath(folder, ROOT).replace(os.sep, "."))
    return found


def test_every_package_of_the_tree_is_in_the_wheels_list():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    missing = sorted(_tree_packages() - listed)
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"
    assert "fmq.cli" in listed  # cli/ is mapped by package-dir, not found under fmq/
