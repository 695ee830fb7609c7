"""Pre-encoded request frames are byte for byte what the protocol encoder makes."""

from __future__ import annotations

from fmq.loadgen.frames import bench_message, send_batch_template, send_template
from fmq.protocol import FrameDecoder, Op, decode_request, encode_request


def test_a_patched_send_frame_equals_a_freshly_encoded_one():
    template = send_template("t", 100)
    for rid in (1, 2, 255, 2**40 + 3):
        assert template.with_id(rid) == encode_request(
            Op.SEND, rid, {"message": bench_message("t", 100)})


def test_a_batch_frame_decodes_to_its_messages():
    frame = FrameDecoder().feed(send_batch_template("topic-a", 10, 5).with_id(9))[0]
    assert (frame.opcode, frame.request_id) == (Op.SEND_BATCH, 9)
    messages = decode_request(frame)["messages"]
    assert len(messages) == 5
    assert all(m["body"] == b"x" * 10 and m["topic"] == "topic-a" for m in messages)
