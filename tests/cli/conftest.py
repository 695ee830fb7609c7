"""The data directory the offline-command tests work on: real segments, a real index."""

from __future__ import annotations

import pytest

import fmq

#: Small segments, so a few hundred messages span several of them.
CFG = fmq.BrokerConfig(segment_size=16 * 1024, max_message_size=4096,
                       checkpoint_interval_ms=0, retention_interval_ms=0)


def write_data_dir(path: str, *, messages: int = 120, body_repeat: int = 20,
                   transactions: bool = True) -> str:
    """A closed data directory at ``path``: ``messages`` keyed messages on topic ``t`` and,
    with ``transactions``, one committed transaction (``tx-done``) and one left open
    (``tx-open``), both of producer group ``g``."""
    with fmq.Broker.open(path, CFG) as b:
        for i in range(messages):
            b.send(fmq.Message("t", f"body-{i}".encode() * body_repeat, key=f"k{i}"))
        if transactions:
            committed = b.transactions.prepare([fmq.Message("t", b"tx-body" * 50)], "g",
                                               tx_id="tx-done")
            b.transactions.commit(committed)
            b.transactions.prepare([fmq.Message("t", b"open" * 80)], "g", tx_id="tx-open")
    return path


@pytest.fixture
def data_dir(tmp_path) -> str:
    return write_data_dir(str(tmp_path / "data"))
