"""Shared fixtures: small segments so tests exercise rolling."""

from __future__ import annotations

import pytest

import fmq

#: Spark's test files in two halves of about equal time: each half runs on one xdist worker
#: (`--dist loadgroup`) and shares one Spark session there, so two JVMs run at once, never
#: more (a file not listed joins the second half).
SPARK_FIRST_HALF = frozenset({
    "test_rebuild.py", "test_topic_source.py", "test_bulk_load.py", "test_dedup_rebuild.py",
    "test_errors.py", "test_queue_counts.py", "test_swap.py", "test_topic_rebuild.py",
    "test_topic_groups.py",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "spark" in item.path.parts:
            half = 1 if item.path.name in SPARK_FIRST_HALF else 2
            item.add_marker(pytest.mark.xdist_group(f"spark-{half}"))


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
