from __future__ import annotations

import pytest

from .harness import ServerProcess


@pytest.fixture
def start_server(tmp_path):
    """start_server(config=None) -> a running ServerProcess; all are killed at the end."""
    started: list[ServerProcess] = []

    def start(config: dict | None = None, name: str = "data") -> ServerProcess:
        srv = ServerProcess(str(tmp_path / name), config)
        started.append(srv)
        return srv.start()

    yield start
    for srv in started:
        srv.kill()


#: Small and fast: feedback after 300 ms, group members dropped after 1.5 s of silence.
FAST = {"tx_check_after_ms": 300, "checkpoint_interval_ms": 0,
        "server": {"group_session_timeout_ms": 1500, "group_heartbeat_interval_ms": 200,
                   "shutdown_grace_ms": 10000}}
