"""The batched-producing examples of docs/operations.md run against a real server, as
written."""

from __future__ import annotations

import pathlib
import re

from .conftest import FAST
from .helpers import read_topic

DOC = pathlib.Path(__file__).parents[2] / "docs" / "operations.md"


def test_batched_producing_examples_run(start_server, capsys):
    srv = start_server(FAST)
    section = DOC.read_text().split("### Batched producing")[1].split("\n### ")[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2 and "send_async" in blocks[0] and "AsyncProducer" in blocks[1]
    for code in blocks:
        exec(compile(code.replace("127.0.0.1:9876", srv.address), str(DOC), "exec"), {})
    printed = capsys.readouterr().out.split()
    assert printed[:2] == ["0", "0"] and len(printed) == 3  # first in their queues
    stored = read_topic(srv.address, "clicks")
    assert sum(len(m) for m in stored.values()) == 1001
    orders = [m.body for msgs in read_topic(srv.address, "orders").values() for m in msgs]
    assert orders == [b"one"]
