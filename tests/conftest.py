"""Shared fixtures: small segments so tests exercise rolling."""

from __future__ import annotations

import gc
import sys

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


#: Set on a test whose call failed (pytest_runtest_makereport below).
CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.when == "call" and report.failed:
        item.stash[CALL_FAILED] = True
    return report


@pytest.fixture(autouse=True)
def _leaks_of_a_failed_test_fail_it(request):
    """What a failed test leaves open warns (an error, pyproject.toml) in its own teardown,
    not in whichever later test of the worker happens to run the garbage collector: its
    traceback, kept for post-mortem debugging until the next test starts, holds its locals
    (a socket the test had still to close among them) in reference cycles. A passing test's
    leaks warn where they happen (reference counting), unless in a cycle; a collection after
    every test would catch those too, but costs about 0.3 s a test here."""
    yield
    if not request.node.stash.get(CALL_FAILED, False):
        return
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):  # --pdb has run by now
            delattr(sys, name)
    gc.collect()


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
