"""A typed error raised by the broker reaches the client as the same class, with the same
message and the same fields (docs/protocol.md section 3)."""

from __future__ import annotations

import os

from fmq.client import Producer
from fmq.datadir import LOG_DIR, SEGMENT_SUFFIX
from fmq.errors import BadRecord
from fmq.protocol import Op

from .conftest import FAST

BODY = b"the body whose bytes are damaged on disk"


def test_a_damaged_record_arrives_as_bad_record_with_its_offset_and_reason(start_server):
    srv = start_server(FAST)
    with Producer(srv.address, retries=0) as producer:
        sent = producer.send("damaged", BODY, queue_id=0)
        log_dir = os.path.join(srv.data_dir, LOG_DIR)
        for name in os.listdir(log_dir):
            if not name.endswith(SEGMENT_SUFFIX):
                continue
            with open(os.path.join(log_dir, name), "r+b") as f:
                data = f.read()
                at = data.find(BODY)
                if at >= 0:
                    f.seek(at)
                    f.write(b"T")  # the record's CRC no longer matches
                    break
        else:
            raise AssertionError("the message body is in no segment")
        try:
            producer.call(Op.PULL, {"topic": "damaged", "queue_id": 0, "offset": 0,
                                    "max_messages": 1, "wait_ms": 0})
        except BadRecord as exc:
            error = exc
        else:
            raise AssertionError("a pull of a damaged record succeeded")
    assert error.offset == sent.offset
    assert error.reason == "CRC-32C mismatch"
    assert str(error) == str(BadRecord(sent.offset, "CRC-32C mismatch"))
