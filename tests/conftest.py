"""Shared fixtures: small segments so tests exercise rolling."""

from __future__ import annotations

import pytest

import fmq


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Spark's tests run on one xdist worker (`--dist loadgroup`): they share one Spark
    session there, and two JVMs at once would only slow each other down."""
    for item in items:
        if "spark" in item.path.parts:
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture
def small_config() -> fmq.BrokerConfig:
    return fmq.BrokerConfig(segment_size=16 * 1024, max_message_size=4096,
                            checkpoint_interval_ms=0, retention_interval_ms=0,
                            tx_check_after_ms=100)


@pytest.fixture
def broker(tmp_path, small_config):
    b = fmq.Broker.open(str(tmp_path / "data"), small_config)
    yield b
    b.close()
