"""docs/kafka.md's table of the APIs implemented (*APIs implemented now*) is the door's:
every API registered is a row with its key and versions, and every row is registered."""

from __future__ import annotations

import re
from pathlib import Path

import fmq.server.kafka  # noqa: F401 - registers every API
from fmq.server.kafka.apis import API_TABLE

DOC = Path(__file__).resolve().parents[2] / "docs" / "kafka.md"
ROW = re.compile(r"^\| (\w+) \| (\d+) \| (\d+)-(\d+) \|", re.M)


def documented() -> dict[int, tuple[str, int, int]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## APIs implemented now", 1)[1].split("\n## ", 1)[0]
    return {int(key): (name, int(low), int(high))
            for name, key, low, high in ROW.findall(section)}


def test_the_documented_api_table_is_the_registered_one():
    served = {key: (api.name, api.min_version, api.max_version)
              for key, api in API_TABLE.items()}
    assert documented() == served
