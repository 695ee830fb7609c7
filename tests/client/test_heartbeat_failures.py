"""A consumer whose server goes away for a while (a fail-over, a restart) logs its failing
heartbeats once per cause, not once a heartbeat, and once that they work again. A real
server, killed and started again on its port."""

from __future__ import annotations

import logging
import time

from fmq.client import Consumer
from tests.server.harness import ServerProcess, wait_until

FAST_HEARTBEATS = {"server": {"group_heartbeat_interval_ms": 200,
                              "group_session_timeout_ms": 30_000}}


def test_a_heartbeat_failing_many_times_is_one_warning(tmp_path, caplog):
    srv = ServerProcess(str(tmp_path / "data"), FAST_HEARTBEATS).start()
    try:
        with caplog.at_level(logging.INFO, logger="fmq.client"), \
                Consumer(srv.address, "billing", ["orders"], retries=1) as consumer:
            assert consumer.assignment  # joined: heartbeats run every 0.2 s
            srv.kill()
            time.sleep(3)  # a dozen heartbeats fail meanwhile
            srv.start()
            wait_until(lambda: "works again" in caplog.text, 30, "a heartbeat to work again")
        warnings = [r.getMessage() for r in caplog.records
                    if r.levelno == logging.WARNING and "heartbeat of" in r.getMessage()]
        assert 1 <= len(warnings) <= 2, warnings  # the lost connection, then the refusals
        [again] = [r.getMessage() for r in caplog.records if "works again" in r.getMessage()]
        tries = int(again.split("after ")[1].split()[0])
        assert tries >= 5, again
    finally:
        srv.kill()
