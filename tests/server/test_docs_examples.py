"""The client example of docs/operations.md runs against a real server, as written (the
endless consumer loop is cut after the three messages the example sends)."""

from __future__ import annotations

import pathlib
import re

import fmq

from .conftest import FAST

DOC = pathlib.Path(__file__).parents[2] / "docs" / "operations.md"


def test_operations_client_example_runs(start_server):
    srv = start_server(FAST)
    section = DOC.read_text().split("## Network server and clients")[1]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    code = code.replace("127.0.0.1:9876", srv.address)
    assert "for msg in c:" in code
    code = code.replace("for msg in c:", "for msg in __import__('itertools').islice(c, 3):")
    handled: list[bytes] = []
    ns = {
        "order_exists": lambda tx_id: True,
        "save_order": lambda tx_id, arg: fmq.TxState.COMMIT,
        "order": {"id": 1},
        "handle": lambda msg: handled.append(msg.body),
    }
    exec(compile(code, str(DOC), "exec"), ns)
    assert sorted(handled) == sorted([b'{"id": 1}', b"a", b"b"])
    assert ns["result"].state == fmq.TxState.COMMIT
