"""The client example of docs/operations.md runs against a real server, as written, and
does what it says: three messages consumed, the transaction committed and saved."""

from __future__ import annotations

import pathlib
import re

import fmq

from .conftest import FAST

DOC = pathlib.Path(__file__).parents[2] / "docs" / "operations.md"


def test_operations_client_example_runs(start_server, capsys):
    srv = start_server(FAST)
    section = DOC.read_text().split("## Network server and clients")[1]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    code = code.replace("127.0.0.1:9876", srv.address)
    ns: dict = {}
    exec(compile(code, str(DOC), "exec"), ns)  # ends by itself: the consumer stops when idle
    printed = capsys.readouterr().out.splitlines()
    assert sorted(line.split(" ", 2)[2] for line in printed) == sorted(
        ["b\'{\"id\": 1}\'", "b\'a\'", "b\'b\'"])
    assert ns["result"].state == fmq.TxState.COMMIT
    assert list(ns["orders"].values()) == [{"id": 1, "amount": 10}]
