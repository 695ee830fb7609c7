"""What the twin tests share: the compiled module next to its pure reference, and the
outcome of a call (its value, or its exception's type and message) to compare."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

import pytest

from fmq import native


def compiled(name: str) -> ModuleType:
    """The compiled module ``name``, imported whatever FMQ_NO_EXTENSIONS says (a twin test
    compares the two in any pass). Where it was not built (no C compiler) the test is
    skipped and says so; under FMQ_REQUIRE_EXTENSIONS=1 (CI) a missing one fails it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if native.require_extensions():
            raise
        pytest.skip(f"{name} is not built here ({exc}): pip install . with a C compiler")


def outcome(fn: Callable, *args, **kwargs) -> tuple:
    """What a call did: its value, or the type's name and the message of what it raised
    (by name: each twin defines its own classes, e.g. FrameTooLarge)."""
    try:
        return ("value", fn(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001 - the twins must fail alike, whatever it is
        return ("raised", type(exc).__name__, str(exc))
