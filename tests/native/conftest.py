from __future__ import annotations

from tests.server.conftest import FAST, start_server  # noqa: F401 - fixtures shared

__all__ = ["FAST", "start_server"]
