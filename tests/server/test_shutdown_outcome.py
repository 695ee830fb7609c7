"""A write in flight when its server stops may be stored or not: its client is told so.

The server (tests.workloads.stalled_disk_server, a real Server whose fdatasync waits while a
stall file exists) has placed the write in its log and waits for the disk when it is
stopped. The records reach the disk when the broker closes, so the write IS stored: an
answer saying it was refused (ServerBusy, "retry": not stored) would be wrong. A graceful
stop closes the connection with the write unanswered (ConnectionLost on the client); a
serve whose request tasks are cancelled with their connections open (what an exception
ending the serve leaves to the event loop's runner) answers them itself, and must say the
same: outcome unknown (ConnectionLost, code 61), which the SDK resends only with dedup.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest

import fmq
from fmq.client import Client
from fmq.client.deadline import may_be_stored
from fmq.errors import ConnectionLost, FMQError
from fmq.message import Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire
from tests.workloads.stalled_disk_server import CONFIG

from .harness import free_port, server_stats, start_workload_server, wait_until


def start_stalled_disk_server(tmp_path, port: int, stop: str) -> subprocess.Popen:
    return start_workload_server(
        "stalled_disk_server", [str(tmp_path / "data"), str(port), str(tmp_path / "stall"), stop],
        f"127.0.0.1:{port}", str(tmp_path / "stalled-server.log"))


@pytest.mark.parametrize("stop", ["graceful", "cancelled"])
def test_a_send_in_flight_at_a_stop_fails_as_outcome_unknown_not_as_refused(tmp_path, stop):
    port = free_port()
    address = f"127.0.0.1:{port}"
    stall = tmp_path / "stall"
    server = start_stalled_disk_server(tmp_path, port, stop)
    outcome: dict = {}
    try:
        with Client(address, retries=0, request_timeout=60, connect_timeout=5) as c:
            c.call(Op.SEND, {"message": message_to_wire(Message("orders", b"first"))})
            stall.touch()  # the disk stops answering: the next write waits for its fdatasync

            def send_at() -> None:  # a scheduled send: stored now, delivered in an hour
                try:
                    outcome["answer"] = c.call(Op.SEND_AT, {
                        "message": message_to_wire(Message("orders", b"later")),
                        "deliver_at": -1, "delay_ms": 3_600_000})
                except FMQError as exc:
                    outcome["error"] = exc

            sending = threading.Thread(target=send_at)
            sending.start()
            with Client(address, retries=0) as probe:  # the SEND_AT and this STATS run
                wait_until(lambda: server_stats(probe)["in_flight"] >= 2, 30,
                           "the SEND_AT in flight")
            server.send_signal(signal.SIGTERM)
            # Once the answer came (or the connection closed), the disk may go on.
            sending.join(20)
            os.unlink(stall)
            sending.join(60)
            assert not sending.is_alive()
        assert server.wait(60) is not None
    finally:
        if stall.exists():
            os.unlink(stall)
        if server.poll() is None:
            server.kill()
            server.wait(10)
    log = (tmp_path / "stalled-server.log").read_text()
    error = outcome.get("error")
    assert isinstance(error, ConnectionLost), (outcome, log[-3000:])
    assert may_be_stored(error) and error.retriable  # the SDK resends it only with dedup
    # ... and it was stored: the data directory holds its timer.
    with fmq.Broker.open(str(tmp_path / "data"), CONFIG) as broker:
        assert broker.deliveries.stats()["timers_pending"] == 1
