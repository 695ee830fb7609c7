"""Queues of the write path (:mod:`fmq.engine.queue_placement`, the rules): the one place
the rest of FMQ imports them from, and the one place their implementation is chosen.

``queue_placement`` runs compiled (``fmq.engine._queue_placement_c``: the same source
compiled by Cython, setup.py) where ``fmq.native.choose`` picks it, else as it is. A broker
uses one of them throughout: its :class:`Queues` and the functions that take it come from
the same module. :data:`TWINS` lists each chosen name next to its reference (tests/native
compares them).
"""

from __future__ import annotations

from fmq import native
from fmq.engine import queue_placement as queue_placement_py

#: The placement running: ``queue_placement_py`` or its compiled twin ``_queue_placement_c``.
PLACEMENT_MODULE = native.choose(queue_placement_py)

Queues = PLACEMENT_MODULE.Queues
stored_queue_counts = PLACEMENT_MODULE.stored_queue_counts
check_messages = PLACEMENT_MODULE.check_messages
check_messages_each = PLACEMENT_MODULE.check_messages_each
append_message_locked = PLACEMENT_MODULE.append_message_locked
place_message_locked = PLACEMENT_MODULE.place_message_locked
place_messages = PLACEMENT_MODULE.place_messages

#: Each chosen name next to its reference: what the twin tests compare.
TWINS: dict[str, tuple[object, object]] = {
    name: (getattr(queue_placement_py, name), getattr(PLACEMENT_MODULE, name))
    for name in ("Queues", "stored_queue_counts", "check_messages", "check_messages_each",
                 "append_message_locked", "place_message_locked", "place_messages")
}

__all__ = [
    "PLACEMENT_MODULE", "TWINS", "Queues", "append_message_locked", "check_messages",
    "check_messages_each", "place_message_locked", "place_messages", "stored_queue_counts",
]
