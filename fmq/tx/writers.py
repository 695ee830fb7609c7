"""The transaction writer a broker runs (:mod:`fmq.tx.writer`, the rules): the one place
it is chosen.

``writer`` runs compiled (``fmq.tx._writer_c``: the same source compiled by Cython,
setup.py) where ``fmq.native.choose`` picks it, else as it is. The per-turn bookkeeping of
PREPAREs and COMMITs (checks, the open transactions registered, the records and index
items built) runs once per request on the event loop, and the interpreter's own cost of it
was most of a PREPARE's (docs/performance.md). tests/native/test_tx_writer_twins.py
compares the two.
"""

from __future__ import annotations

from fmq import native
from fmq.tx import writer as writer_py

#: The writer running: ``writer_py`` or its compiled twin ``_writer_c``.
WRITER_MODULE = native.choose(writer_py)

TxWriter = WRITER_MODULE.TxWriter

__all__ = ["WRITER_MODULE", "TxWriter"]
