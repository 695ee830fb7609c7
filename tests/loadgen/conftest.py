"""The load generator's tests against a real ``fmq server`` subprocess on 127.0.0.1: one
per test module (its tests use their own topics), killed when the module ends."""

from __future__ import annotations

import pytest

from tests.server.harness import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory, request):
    srv = ServerProcess(str(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
                            / "data")).start()
    yield srv
    srv.kill()
