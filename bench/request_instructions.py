"""Instructions per request of the server's decode of sends and of a SEND's answer
(callgrind): the way the server does it now next to the way it did before, in this checkout.

Instruction counts hold steady on a shared, noisy machine where the wall clock does not.
Each way runs ``--calls`` and three times as many calls under ``valgrind --tool=callgrind``;
the difference divided by the extra calls is the cost of one call (imports and start-up
cancel out). 1 KiB bodies. Not part of the test run::

    python bench/request_instructions.py [--calls 1000] [--only TEXT]

The ways: a SEND and a SEND_BATCH of 16 decoded by ``decode_request`` into field dicts and
then ``message_from_wire`` (before) or by ``decode_server_request`` into Messages (now);
a SEND's answer encoded from its field dict (before) or packed by ``send_answer`` (now);
a SEND_BATCH of 16 placed by a broker and answered from a ``SendResult`` per message
(before) or from placement's packed results (now); a transaction of one message placed
(PREPARE and COMMIT, no disk wait) with its marks written by the mark encoder (before) or
by the C record encoder (now); a transaction's PREPARE half alone (the COMMIT's share is the
whole transaction's less it), a COMMIT's decode, and the PREPARE and COMMIT answers encoded
from field dicts (before) or packed (now: ``tx_id_answer``, ``state_answer``); a PULL's and a
COMMIT_OFFSET's decode into a field dict (the general way) or by ``plain_pull`` and
``plain_commit_offset`` (the short step), and a PULL answer of one encoded message through
the codec (the general way) or framed with one ``struct`` pack and a join (the short step).
The framing rows: a session's read of 64 SEND frames (or of one) split by ``framing.py`` or
its Cython twin ``_framing_c.pyx`` and admitted by the request budget frame by frame
(before) or together (now), per read.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SETUP = """
import sys
from fmq.message import Message, new_send_result
from fmq.protocol import Frame, Op, decode_request, encode_request, encode_response
from fmq.protocol.message_requests import decode_server_request
from fmq.protocol.values import message_from_wire, message_to_wire, result_to_wire, send_answer
m = Message("fmq-bench", b"x" * 1024)
one = encode_request(Op.SEND, 1, {"message": message_to_wire(m)})[16:]
many = encode_request(Op.SEND_BATCH, 1, {"messages": [message_to_wire(m)] * 16})[16:]
send = Frame(1, Op.SEND, 0, 1, memoryview(one))
batch = Frame(1, Op.SEND_BATCH, 0, 1, memoryview(many))
result = new_send_result(123456789, 3, 98765)
n = int(sys.argv[1])
"""

#: A broker for the placement ways (the log and the index in a temporary directory; the
#: index thread's instructions are counted too, the same for both ways).
PLACING = """
import tempfile
import fmq
from fmq.server.ops.handlers import send_batch_reply
broker = fmq.Broker.open(tempfile.mkdtemp(prefix="fmq-instr-"),
                         fmq.BrokerConfig(segment_size=64 * 1024 * 1024))
msgs = [m] * 16
"""

#: A transaction of one message placed (PREPARE, PRE_MESSAGE, REF_MESSAGE, COMMIT) without
#: waiting for the disk, as the server's pipeline places one.
TRANSACTION = """
tx_api = broker.transactions
for _ in range(n):
    tx, _end = tx_api.place_prepare([m], "g", None)
    tx_api.prepare_done(tx, None)
    tx_api.commit_done(tx_api.place_commit("g", tx.tx_id)[0], None)
broker.close()
"""

#: The PREPARE half alone (the transactions stay open: ``--calls`` times 3 stays below
#: ``max_open_transactions``); the COMMIT's share is the whole transaction's less this.
PREPARE_ONLY = """
tx_api = broker.transactions
for _ in range(n):
    tx, _end = tx_api.place_prepare([m], "g", None)
    tx_api.prepare_done(tx, None)
broker.close()
"""

#: The sixth pass's marks: the mark encoder (fmq/log/record/marks.py; its compiled twin
#: _marks_c is gone since marks go through the C record encoder).
MARKS_BY_MARK_ENCODER = """
from fmq.log import record
from fmq.log.record import marks
from fmq.tx import writers
writers.WRITER_MODULE.encode_mark_into = marks.mark_encoder(
    record.crc32c, record.CODEC_MODULE.python_codec(record.crc32c).encode_into)
"""

#: A PULL and a COMMIT_OFFSET frame, and the short step's decoders.
PULL_FRAMES = """
from fmq.protocol.read_requests import plain_commit_offset, plain_pull
pull = Frame(1, Op.PULL, 0, 1, memoryview(encode_request(Op.PULL, 1, {
    "topic": "fmq-bench", "queue_id": 1, "offset": 12345, "max_messages": 32,
    "wait_ms": 1000})[16:]))
commit_offset = Frame(1, Op.COMMIT_OFFSET, 0, 1, memoryview(encode_request(
    Op.COMMIT_OFFSET, 1, {"group": "g", "topic": "fmq-bench", "queue_id": 1,
                          "next_offset": 12345})[16:]))
"""

#: One pulled message of 1 KiB, encoded as a pull keeps it.
PULL_ANSWER = """
import struct
from fmq.message import StoredMessage
from fmq.protocol.types import Encoded
from fmq.server.ops.pull_answers import encode_stored
items = Encoded(1, encode_stored(StoredMessage("fmq-bench", 1, 5, 123456, b"x" * 1024, None,
                                               None, {}, 1700000000000)))
head = struct.Struct(">IBBHQI").pack
tail = struct.Struct(">QQ").pack
"""

#: A session's frame splitter and request budget (no server): ``frames`` is 64 SENDs of 1 KiB
#: as one read (a pipelined window), ``one`` a single SEND (one request in flight); every
#: read's bytes are given back before the next, so the budget never fills.
FRAMING = """
import importlib
from fmq.protocol import framing
from fmq.server.net.budgets import SharedBudget
from fmq.server.net.request_admission import RequestAdmission
one = encode_request(Op.SEND, 1, {"message": message_to_wire(m)})
frames = one * 64
budget = SharedBudget("requests", 256 * 1024 * 1024, 64 * 1024 * 1024)
admission = RequestAdmission(budget.share(), accepting=lambda: True, pause=lambda: None,
                             resume=lambda: None)
class OneByOne:  # every frame asked of admit, as the decoder asked before it counted a room
    admit = admission.admit
    def room(self):
        return 0
compiled = importlib.import_module("fmq.protocol._framing_c").FrameDecoder()
pure = framing.FrameDecoder()
def read(decoder, data, asked):
    got = decoder.feed(data, asked)
    held = admission.share.used
    admission.received(held)
    admission.release(held)
"""

WAYS = {
    "framing: a read of 64 SENDs, framing.py, admitted one by one":
        FRAMING + "asked = OneByOne()\nfor _ in range(n): read(pure, frames, asked)",
    "framing: a read of 64 SENDs, framing.py, admitted together":
        FRAMING + "for _ in range(n): read(pure, frames, admission)",
    "framing: a read of 64 SENDs, _framing_c.pyx, admitted one by one":
        FRAMING + "asked = OneByOne()\nfor _ in range(n): read(compiled, frames, asked)",
    "framing: a read of 64 SENDs, _framing_c.pyx, admitted together":
        FRAMING + "for _ in range(n): read(compiled, frames, admission)",
    "framing: a read of one SEND, framing.py":
        FRAMING + "for _ in range(n): read(pure, one, admission)",
    "framing: a read of one SEND, _framing_c.pyx":
        FRAMING + "for _ in range(n): read(compiled, one, admission)",
    "SEND decode, field dicts + message_from_wire":
        'for _ in range(n): message_from_wire(decode_request(send)["message"])',
    "SEND decode, decode_server_request":
        'for _ in range(n): decode_server_request(send)["message"]',
    "SEND_BATCH of 16 decode, field dicts + message_from_wire":
        'for _ in range(n): [message_from_wire(x) for x in decode_request(batch)["messages"]]',
    "SEND_BATCH of 16 decode, decode_server_request":
        'for _ in range(n): decode_server_request(batch)["messages"]',
    "SEND answer, field dict through the codec":
        'for _ in range(n): encode_response(Op.SEND, 7, {"result": result_to_wire(result)})',
    "SEND answer, send_answer":
        "for _ in range(n): encode_response(Op.SEND, 7, send_answer(result))",
    "SEND_BATCH of 16 placed and answered, SendResults":
        PLACING + "for _ in range(n): encode_response(Op.SEND_BATCH, 7, send_batch_reply("
                  "broker.place_requests(msgs, [16])[0]))\nbroker.close()",
    "SEND_BATCH of 16 placed and answered, packed results":
        PLACING + "for _ in range(n): encode_response(Op.SEND_BATCH, 7, send_batch_reply("
                  "broker.place_requests(msgs, [16], packed=True)[0]))\nbroker.close()",
    "a transaction of one message placed, marks by the compiled mark encoder":
        PLACING + MARKS_BY_MARK_ENCODER + TRANSACTION,
    "a transaction of one message placed, marks by the C record encoder":
        PLACING + TRANSACTION,
    "a transaction's PREPARE placed (no COMMIT)":
        PLACING + PREPARE_ONLY,
    "COMMIT decode, decode_request":
        'c = Frame(1, Op.COMMIT, 0, 1, memoryview(encode_request(Op.COMMIT, 1, {'
        '"producer_group": "g", "tx_id": "0.1-127.0.0.1-1-2-0-3"})[16:]))\n'
        'for _ in range(n): decode_server_request(c)',
    "PREPARE answer, field dict through the codec":
        'for _ in range(n): encode_response(Op.PREPARE, 7, {"tx_id": "0.1-127.0.0.1-1-2-0-3"})',
    "PREPARE answer, tx_id_answer":
        'from fmq.protocol.values import tx_id_answer\n'
        'for _ in range(n): encode_response(Op.PREPARE, 7, tx_id_answer("0.1-127.0.0.1-1-2-0-3"))',
    "COMMIT answer, field dict through the codec":
        'for _ in range(n): encode_response(Op.COMMIT, 7, {"state": "commit"})',
    "COMMIT answer, state_answer":
        'from fmq.protocol.values import state_answer\nfrom fmq.tx.state import TxState\n'
        'for _ in range(n): encode_response(Op.COMMIT, 7, state_answer(TxState.COMMIT))',
    "PULL decode, decode_server_request":
        PULL_FRAMES + 'for _ in range(n): decode_server_request(pull)',
    "PULL decode, plain_pull":
        PULL_FRAMES + 'for _ in range(n): plain_pull(pull.payload)',
    "COMMIT_OFFSET decode, decode_server_request":
        PULL_FRAMES + 'for _ in range(n): decode_server_request(commit_offset)',
    "COMMIT_OFFSET decode, plain_commit_offset":
        PULL_FRAMES + 'for _ in range(n): plain_commit_offset(commit_offset.payload)',
    "PULL answer of one message, field dict through the codec":
        PULL_ANSWER + 'for _ in range(n): encode_response(Op.PULL, 7, {"messages": items, '
                      '"min_offset": 0, "next_offset": 9})',
    "PULL answer of one message, framed (the short step)":
        PULL_ANSWER + 'for _ in range(n): b"".join((head(32 + len(items.data), 1, Op.PULL, 1, '
                      '7, 1), items.data, tail(0, 9)))',
}


def instructions(code: str, calls: int) -> int:
    with tempfile.TemporaryDirectory(prefix="fmq-callgrind-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
             "-c", SETUP + code, str(calls)],
            capture_output=True, text=True, cwd=tmp, env=dict(os.environ, PYTHONPATH=HERE),
            check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in callgrind's output: {done.stderr[-500:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--only", default="", help="the ways whose name contains this text")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt install valgrind)")
    print("| way | instructions per call |\n|---|---:|")
    for name, code in WAYS.items():
        if args.only not in name:
            continue
        extra = instructions(code, 3 * args.calls) - instructions(code, args.calls)
        print(f"| {name} | {extra / (2 * args.calls):,.0f} |")


if __name__ == "__main__":
    main()
