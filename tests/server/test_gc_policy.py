"""The serving process's garbage collector (fmq/server/gc_policy.py): what was alive when it
started serving is frozen, young collections come after YOUNG_THRESHOLD allocations, and
STATS says so; cyclic garbage made while serving is still collected."""

from __future__ import annotations

import gc
import subprocess
import sys

from fmq.client import Producer
from fmq.server.gc_policy import YOUNG_THRESHOLD

from .conftest import FAST
from .harness import server_stats


def test_a_server_freezes_what_it_started_with_and_collects_young_objects_less_often(
        start_server):
    srv = start_server(FAST)
    with Producer(srv.address) as producer:
        for i in range(200):
            producer.send("gc-policy", b"x" * 100, key=str(i))
    collector = server_stats(srv.address)["gc"]
    assert collector["thresholds"][0] == YOUNG_THRESHOLD
    assert collector["thresholds"][1:] == list(gc.get_threshold()[1:])  # Python's own
    assert collector["frozen"] > 10_000  # the modules, the opened broker
    assert len(collector["collections"]) == 3


def test_cyclic_garbage_is_still_collected_after_the_tuning():
    """In a process of its own: the tuning changes this process's collector for good."""
    code = (
        "import gc, weakref\n"
        "from fmq.server.gc_policy import YOUNG_THRESHOLD, tune_for_serving\n"
        "tune_for_serving()\n"
        "before = gc.get_stats()[0]['collections']\n"
        "class Node: pass\n"
        "a, b = Node(), Node()\n"
        "a.other, b.other = b, a\n"
        "alive = weakref.ref(a)\n"
        "del a, b\n"
        # Containers kept alive count towards the next young collection; no gc.collect().
        "kept = [[] for _ in range(YOUNG_THRESHOLD + 100)]\n"
        "print(gc.get_stats()[0]['collections'] > before, alive() is None,\n"
        "      gc.get_freeze_count() > 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]


def test_describe_reads_the_frozen_count_kept_at_the_freeze_instead_of_walking_it():
    """STATS runs on the server's loop: counting the frozen objects walks every one of them
    (tens of milliseconds in a serving process, each STATS, each console refresh), so the
    count is kept when the objects are frozen. In a process of its own with a large frozen
    heap: describe() must cost a small part of one such walk, and still give the count."""
    code = (
        "import gc, time, statistics\n"
        "from fmq.server.gc_policy import describe, tune_for_serving\n"
        "heap = [{'n': i} for i in range(400_000)]\n"
        "tune_for_serving()\n"
        "def took(fn):\n"
        "    times = []\n"
        "    for _ in range(5):\n"
        "        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)\n"
        "    return statistics.median(times)\n"
        "walk, described = took(gc.get_freeze_count), took(describe)\n"
        "print(described < walk / 10, describe()['frozen'] == gc.get_freeze_count(),\n"
        "      walk, described)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["True", "True"], done.stdout
