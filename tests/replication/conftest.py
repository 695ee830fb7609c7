from __future__ import annotations

import pytest

from tests.server.harness import ServerProcess


@pytest.fixture
def node(tmp_path):
    """node(name, config) -> a started ServerProcess; every one is killed at the end."""
    started: list[ServerProcess] = []

    def start(name: str, config: dict, start: bool = True) -> ServerProcess:
        srv = ServerProcess(str(tmp_path / name), config)
        started.append(srv)
        return srv.start() if start else srv

    yield start
    for srv in started:
        srv.kill()
