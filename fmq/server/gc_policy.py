"""How the server runs Python's cyclic garbage collector.

The collector runs a young collection once container allocations outnumber deallocations
by 700 (the default first number of :func:`gc.get_threshold`), and every tenth of those
collects the older generations too, up to the whole heap. A server allocates a few
container objects per message (the ``Message``, its result, the queue entry, the
request's future), and those of the messages in flight outlive a young collection: they
are promoted, and collections of the older generations follow, a full one going over every
object alive, the imported modules' included. None of them is garbage: each dies by
reference counting once its request is answered.

So a serving process collects once and freezes what is alive then (:func:`gc.freeze`: the
modules, the opened broker; the collector never looks at them again), and makes young
collections rarer (:data:`YOUNG_THRESHOLD`). Cyclic garbage is still collected, only after
more allocations: meanwhile it holds the memory of at most about ten thousand objects.
Measured with row 2's load (SEND_BATCH of 16, 64 connections): about 1.2x the messages per
second and 0.83x the server's CPU per message (docs/performance.md, "Native, fifth pass").
STATS reports the thresholds, the frozen objects and the collections per generation
(:func:`describe`).
"""

from __future__ import annotations

import gc
from typing import Any

#: Container allocations (less deallocations) between young collections; Python's is 700.
YOUNG_THRESHOLD = 10_000

#: Objects frozen by the last :func:`tune_for_serving`. Counting them again
#: (gc.get_freeze_count) walks every one: tens of milliseconds in a serving process, on the
#: event loop of each STATS; only a freeze changes the count, so it is kept from there.
_frozen = 0


def tune_for_serving() -> None:
    """Collect, freeze every object alive now, and collect young objects every
    :data:`YOUNG_THRESHOLD` allocations (the older generations' thresholds unchanged).
    Called before each event loop starts serving, so a role change's old broker is
    collected before what is alive is frozen again."""
    global _frozen
    gc.collect()
    gc.freeze()
    _frozen = gc.get_freeze_count()
    _young, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)


def describe() -> dict[str, Any]:
    """The collector's settings and work so far (STATS, ``fmq stats``)."""
    return {"thresholds": list(gc.get_threshold()), "frozen": _frozen,
            "collections": [generation["collections"] for generation in gc.get_stats()]}
