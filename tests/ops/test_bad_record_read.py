"""Issue 14, item 4: a damaged record a consumer reads through the server is logged at ERROR
once, with its offset and the advice, and counted in the stats."""

from __future__ import annotations

import os

import pytest

import fmq
from fmq.client import Client
from fmq.datadir import LOG_DIR
from fmq.errors import BadRecord
from fmq.protocol import Op
from tests.server.harness import broker_stats, free_port

from .conftest import FAST
from .test_metrics import scrape, value


def write_and_damage(data: str, count: int = 6, damaged: int = 2) -> int:
    """``count`` messages in queue 0 of topic ``t`` (clean close: a checkpoint past them),
    then one byte of message ``damaged``'s body flipped. Returns that record's log offset."""
    with fmq.Broker.open(data, fmq.BrokerConfig(checkpoint_interval_ms=0)) as b:
        offsets = [b.send(fmq.Message("t", f"body-{i:04d}".encode(), queue_id=0)).offset
                   for i in range(count)]
    (seg,) = os.listdir(os.path.join(data, LOG_DIR))
    path = os.path.join(data, LOG_DIR, seg)
    with open(path, "r+b") as f:
        raw = f.read()
        pos = raw.index(f"body-{damaged:04d}".encode())
        f.seek(pos + 5)
        f.write(bytes([raw[pos + 5] ^ 0x01]))
    return offsets[damaged]


def pull(client: Client, offset: int) -> list[bytes]:
    reply = client.call(Op.PULL, {"topic": "t", "queue_id": 0, "offset": offset,
                                  "max_messages": 10, "wait_ms": 0})
    return [m["body"] for m in reply["messages"]]


def test_damaged_record_is_logged_once_and_counted(tmp_path, start_server):
    bad = write_and_damage(str(tmp_path / "data"))
    port = free_port()
    srv = start_server({**FAST, "server": {**FAST["server"], "metrics_port": port}})
    with Client(srv.address, retries=0) as c:
        assert pull(c, 0) == [b"body-0000", b"body-0001"]  # what precedes the damage
        for _ in range(3):
            with pytest.raises(BadRecord) as err:
                pull(c, 2)
            assert err.value.offset == bad
        assert pull(c, 3)[0] == b"body-0003"  # the queue past it still reads
        s = broker_stats(c)
        metrics = scrape(port)
    assert (s["bad_records_read"], s["bad_record_reads"]) == (1, 3)
    assert value(metrics, "fmq_bad_records_read_total") == 1
    assert srv.stop() == 0
    errors = [line for line in srv.log().splitlines()
              if " ERROR " in line and "damaged record" in line]
    assert len(errors) == 1, srv.log()
    assert f"log offset {bad}" in errors[0]
    assert "fmq log verify" in errors[0] and "fmq log repair" in errors[0]
    assert "reset-offsets" in errors[0] and "--to-offset 3 --execute" in errors[0]


def test_an_operator_reset_lets_a_group_skip_the_damaged_record(tmp_path, start_server):
    from tests.server.harness import json_lines, run_cli

    write_and_damage(str(tmp_path / "data"))
    srv = start_server(FAST)
    args = ("consume", "--server", srv.address, "--topic", "t", "--group", "g", "--max", "6",
            "--idle-timeout", "2", "--json")
    stuck = run_cli(*args, timeout=60)
    assert stuck.returncode == 1 and "bad record at log offset" in stuck.stderr
    assert "Traceback" not in stuck.stderr
    # never automatic: the group's queue is still stuck at the damaged message
    assert json_lines(run_cli(*args, timeout=60).stdout) == []
    reset = run_cli("groups", "reset-offsets", "g", "--topic", "t", "--queue", "0",
                    "--to-offset", "3", "--execute", "--server", srv.address, "--json")
    assert reset.returncode == 0, reset.stderr
    rest = run_cli(*args, timeout=60)
    assert rest.returncode == 0, rest.stderr
    assert [m["body"] for m in json_lines(rest.stdout)] == ["body-0003", "body-0004",
                                                            "body-0005"]
    assert srv.stop() == 0
    assert "reset group 'g' offset of t/0" in srv.log()
