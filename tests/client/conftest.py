"""Client tests run against a real ``fmq server`` process (the server tests' fixture)."""

from __future__ import annotations

from tests.server.conftest import FAST, start_server

__all__ = ["FAST", "start_server"]
