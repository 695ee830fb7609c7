"""The server's modules import each other in one direction only: session -> operations ->
context, the server on top; the wire values and error rebuilding need nothing of it. (No
import cycle anywhere is tests/test_layers.py's check.)"""

from __future__ import annotations

from tests.test_layers import IMPORTS


def imported_by(module: str) -> set[str]:
    return {i.target for i in IMPORTS if i.source == module}


def test_handlers_and_sessions_never_import_the_server():
    assert "fmq.server.server" not in imported_by("fmq.server.net.session")
    assert "fmq.server.server" not in imported_by("fmq.server.ops.handlers")
    assert {"fmq.server.net.session", "fmq.server.server"}.isdisjoint(
        imported_by("fmq.server.context"))

