"""Retention on a real server whose pending timers alone exceed ``retention_bytes``: it
moves each timer at most once, then settles (an idle server writes nothing more), logs one
warning and reports the timers' bytes in ``fmq stats`` and the metrics."""

from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import fmq
from fmq.log.placement import now_ms
from tests.server.harness import ServerProcess, broker_stats, free_port

pytestmark = pytest.mark.timeout(240)

TIMERS = 20_000
LIMIT = 512 * 1024
BROKER = {"segment_size": 64 * 1024, "max_message_size": 4096, "retention_bytes": LIMIT,
          "retention_interval_ms": 200, "checkpoint_interval_ms": 0, "timer_batch": 1024}


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if not s.labels}


def _after_passes(address: str, passes: int, seconds: float = 60.0) -> dict:
    """The stats once ``passes`` retention passes have run (or at the deadline: a pass
    that never ends shows in the counters the test checks)."""
    deadline = time.monotonic() + seconds
    while True:
        s = broker_stats(address)
        if s.get("retention_passes", 0) >= passes or time.monotonic() > deadline:
            return s
        time.sleep(0.1)


def test_pending_timers_over_the_limit_move_once_then_the_idle_server_settles(tmp_path):
    data = str(tmp_path / "data")
    # 20 000 timers an hour ahead (about 2.4 MiB, over the 512 KiB limit) and 1 MiB of
    # plain messages after them, written by the embedded broker the server then opens.
    with fmq.Broker.open(data, fmq.BrokerConfig(**{**BROKER, "retention_bytes": 0})) as b:
        due = now_ms() + 3_600_000
        for _ in range(TIMERS // 1000):
            b._timers.schedule([fmq.Message("later", b"t" * 40) for _ in range(1000)], due)
        for _ in range(1024):
            b.send(fmq.Message("plain", b"p" * 1000))
    port = free_port()
    srv = ServerProcess(data, {**BROKER, "server": {"metrics_port": port}})
    try:
        srv.start()
        first = _after_passes(srv.address, 3)
        moved = first["delivery"]["timer_relocations"]
        assert moved <= TIMERS, f"{moved} relocations of {TIMERS} pending timers"
        assert first["retention_passes"] >= 3
        later = _after_passes(srv.address, first["retention_passes"] + 3)
        assert later["retention_passes"] >= first["retention_passes"] + 3
        # Idle: no timer moved again and nothing was written after the first pass.
        assert later["delivery"]["timer_relocations"] == moved == TIMERS
        assert later["log_end"] == first["log_end"]
        assert later["delivery"]["timers_pending"] == TIMERS
        # The plain messages behind the timers were deleted: the log is the timers' size.
        pinning = later["timers_pinning_retention_bytes"]
        assert pinning > LIMIT
        assert later["log_end"] - later["log_start"] < pinning + LIMIT
        metrics = _scrape(port)
        assert metrics["fmq_timers_pinning_retention_bytes"] == pinning
        assert metrics["fmq_timer_relocations_total"] == TIMERS
        assert srv.log().count("pending timers hold") == 1  # once, not every pass
    finally:
        srv.kill()
