"""A transaction's answers packed at once (``tx_id_answer`` for PREPARE, ``state_answer``
for COMMIT, ROLLBACK, ANSWER_UNCERTAIN and RESOLVE_TX) are the frames the codec makes from
the field dicts, on the compiled and the pure codec alike; a value the codec refuses still
gets the codec's own error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fmq.errors import ProtocolError
from fmq.protocol import Op, decode_response, encode_response
from fmq.protocol.frame import HEADER_SIZE, Frame
from fmq.protocol.types import Packed
from fmq.protocol.values import state_answer, tx_id_answer
from fmq.tx.state import TxState

#: Names of 1-255 bytes of UTF-8, as PREPARE takes them (and the ids the broker makes).
NAMES = st.text(min_size=1, max_size=80).filter(lambda s: len(s.encode()) <= 255)


@given(NAMES, st.integers(1, 2**64 - 1))
def test_a_prepare_answer_is_the_codecs_frame(tx_id: str, rid: int) -> None:
    packed = tx_id_answer(tx_id)
    assert type(packed) is Packed
    frame = encode_response(Op.PREPARE, rid, packed)
    assert frame == encode_response(Op.PREPARE, rid, {"tx_id": tx_id})
    back = decode_response(Frame(1, Op.PREPARE, 1, rid, memoryview(frame[4 + HEADER_SIZE:])))
    assert back == {"tx_id": tx_id}


def test_an_id_of_255_bytes_is_packed_and_a_longer_one_left_to_the_codec() -> None:
    assert type(tx_id_answer("é" * 127 + "x")) is Packed  # 255 bytes
    longer = "x" * 70_000
    assert tx_id_answer(longer) == {"tx_id": longer}
    with pytest.raises(ProtocolError, match="limit"):
        encode_response(Op.PREPARE, 1, tx_id_answer(longer))


@pytest.mark.parametrize("state", list(TxState))
@pytest.mark.parametrize("op", [Op.COMMIT, Op.ROLLBACK, Op.ANSWER_UNCERTAIN, Op.RESOLVE_TX])
def test_a_state_answer_is_the_codecs_frame(op: Op, state: TxState) -> None:
    assert (encode_response(op, 9, state_answer(state))
            == encode_response(op, 9, {"state": state.value}))
    assert state_answer(state.value) is state_answer(state)  # a plain str names it too
