"""The executor-side derivation: a data-source row becomes the record it was read from."""

from __future__ import annotations

from fmq.log.scanner import LogScanner
from fmq.spark.derive import record_from_row

from .damage import log_dir


def test_record_from_row_inverts_to_dict(built_log):
    for rec in LogScanner(log_dir(built_log.path)):
        again = record_from_row(rec.to_dict())
        for field in ("type", "log_offset", "size", "store_time", "queue_id", "queue_offset",
                      "ref_offset", "ref_size", "topic", "tx_id", "producer_group", "key",
                      "tags"):
            assert getattr(again, field) == getattr(rec, field), (field, rec)
