"""Which event loop runs the server: uvloop when it is installed (its loop spends less CPU per
request than asyncio's, see docs/performance.md), else the standard one; the
``event_loop`` setting picks one explicitly."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from fmq.errors import ConfigError

try:
    import uvloop
except ImportError:  # an optional speed-up: the standard loop serves the same protocol
    uvloop = None

EVENT_LOOPS = ("auto", "asyncio", "uvloop")


def resolve_event_loop(choice: str) -> str:
    """``asyncio`` or ``uvloop``: what ``choice`` (one of :data:`EVENT_LOOPS`) runs here."""
    if choice not in EVENT_LOOPS:
        raise ConfigError(f"event_loop must be one of {', '.join(EVENT_LOOPS)}, not {choice!r}")
    if choice == "uvloop" and uvloop is None:
        raise ConfigError("event_loop = uvloop, but uvloop is not installed: pip install uvloop, "
                          "or set event_loop = auto")
    if choice == "auto":
        return "uvloop" if uvloop is not None else "asyncio"
    return choice


def run_on_event_loop(main: Coroutine[Any, Any, None], choice: str) -> None:
    """Run ``main`` to completion on the loop ``choice`` resolves to."""
    if resolve_event_loop(choice) == "uvloop":
        uvloop.run(main)
    else:
        asyncio.run(main)
