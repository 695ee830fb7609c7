"""Placement's packed send results (``PackedResults``) are the results the embedded API
returns, and the server's answers made from them are the frames made from those results.

* As a sequence, ``PackedResults`` is the list of the ``SendResult`` objects it packs: length,
  items (negative indexes, out of range), slices of any step, iteration, equality, repr;
  ``part`` (the send path's slices) is a slice.
* Its layout is the wire's send_result (so the server copies it into an answer).
* ``place_messages(packed=True)`` gives the results ``packed=False`` gives, on the compiled
  and the pure placement, with the same log end and queue state.
* A SEND's and a SEND_BATCH's answer from packed results are the frames from the list.
"""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.config import BrokerConfig
from fmq.engine import queue_placement as pure
from fmq.engine import queues as seat
from fmq.log.log import Log
from fmq.message import Message, PackedResults, SendResult, pack_results
from fmq.protocol import Op, encode_response
from fmq.protocol.layout import SEND_RESULT_FORMAT
from fmq.protocol.values import results_to_wire, send_answer

CONFIG = BrokerConfig(segment_size=64 * 1024, max_message_size=4096)
RESULTS = st.lists(st.builds(SendResult, st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1),
                             st.integers(0, 2**64 - 1)), max_size=12)


def test_the_layout_is_the_wires_send_result() -> None:
    assert PackedResults.FORMAT.format == SEND_RESULT_FORMAT.format
    assert PackedResults.FORMAT.size == SEND_RESULT_FORMAT.size == 20


@given(RESULTS, st.integers(-15, 15), st.integers(-15, 15) | st.none(),
       st.sampled_from([None, 1, 2, -1, 3]))
def test_packed_results_read_as_the_list(results: list[SendResult], index: int,
                                         stop: int | None, step: int | None) -> None:
    packed = pack_results(results)
    assert len(packed) == len(results)
    assert list(packed) == results and packed == results and results == list(packed)
    assert packed == tuple(results) and packed == PackedResults(packed.data)
    assert (packed != results + [SendResult(0, 0, 0)]) and packed != "not results"
    if -len(results) <= index < len(results):
        assert packed[index] == results[index]
    else:
        with pytest.raises(IndexError):
            packed[index]
    assert list(packed[index:stop:step]) == results[index:stop:step]
    assert repr(packed) == f"PackedResults({results!r})"
    start = min(max(index, 0), len(results))
    count = max(stop or 0, 0)
    assert PackedResults.part(packed.data, start, count) == results[start:start + count]
    assert pack_results(packed) is packed


def test_packed_results_refuse_bytes_that_are_not_whole_results() -> None:
    with pytest.raises(ValueError, match="multiple of 20"):
        PackedResults(b"x" * 21)
    with pytest.raises(TypeError):
        hash(PackedResults(b""))


def _place(module, batch: list[Message], packed: bool):
    with tempfile.TemporaryDirectory() as directory:
        log_ = Log(directory, CONFIG.segment_size)
        log_.start_at(0)
        try:
            queues = module.Queues(4, {("a", 1): 7})
            results, end = module.place_messages(log_, queues, batch, packed)
            return results, end, queues.stored_counts(), queues.messages_in, queues.bytes_in
        finally:
            log_.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.builds(Message, st.sampled_from(["a", "b"]), st.binary(max_size=200),
                          key=st.none() | st.text(max_size=5),
                          queue_id=st.none() | st.integers(0, 3)), min_size=1, max_size=20))
@pytest.mark.parametrize("module", [seat.PLACEMENT_MODULE, pure], ids=["seat", "pure"])
def test_packed_placement_gives_the_lists_results(module, batch: list[Message]) -> None:
    packed = _place(module, batch, True)
    plain = _place(module, batch, False)
    assert type(plain[0]) is list
    # A run of two messages or more comes packed; one message stays a list.
    assert type(packed[0]) is (PackedResults if len(batch) > 1 else list)
    assert list(packed[0]) == plain[0] and packed[1:] == plain[1:]


@given(RESULTS)
def test_a_send_batch_answer_from_packed_results_is_the_lists(results) -> None:
    packed = encode_response(Op.SEND_BATCH, 9, {"results": results_to_wire(
        pack_results(results))})
    assert packed == encode_response(Op.SEND_BATCH, 9, {"results": results_to_wire(results)})


@given(RESULTS.filter(len))
def test_a_send_answer_from_a_packed_result_is_the_results(results) -> None:
    one = pack_results(results[:1])
    frame = encode_response(Op.SEND, 9, send_answer(one))
    assert frame == encode_response(Op.SEND, 9, send_answer(results[0]))
    if len(results) > 1:
        with pytest.raises(ValueError, match="one result"):
            send_answer(pack_results(results))
