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


def damaged(data: bytes, how: str, at: int, byte: int) -> bytes:
    """``data`` as a hostile peer may send it: ``truncated`` at ``at``, one byte
    ``flipped`` there, ``byte`` ``trailing``, ``not utf-8`` (a byte no UTF-8 text holds, in
    whatever field is at ``at``), or anything else: as it is."""
    at = at % (len(data) + 1)
    if how == "truncated":
        return data[:at]
    if how == "flipped" and data:
        at = min(at, len(data) - 1)
        return data[:at] + bytes([data[at] ^ (byte or 1)]) + data[at + 1:]
    if how == "trailing":
        return data + bytes([byte])
    if how == "not utf-8":
        return data[:at] + b"\xff" + data[at + 1:]
    return data
