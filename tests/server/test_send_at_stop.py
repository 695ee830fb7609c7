"""Plain SENDs in flight when their server stops gracefully are answered once their flush is
durable, within ``shutdown_grace_ms``: they have no task each (``PlainSends``), so the stop
waits for each session's plain sends to drain (``SessionRequests.drained``) as it waits for
its requests' tasks, before it closes the connections.

The server (tests.workloads.stalled_disk_server, a real Server whose fdatasync waits while a
stall file exists; ``shutdown_grace_ms`` 500) holds the SENDs' flush until it has begun to
stop (its log says so); the disk then goes on. A stop that did not wait for them would close
the connection at once: the client would get ConnectionLost instead of its results.
"""

from __future__ import annotations

import os
import signal
import threading

from fmq.client import Client
from fmq.message import Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire

from .harness import free_port, server_stats, start_workload_server, wait_until

SENDERS = 4


def test_plain_sends_in_flight_at_a_graceful_stop_are_answered_when_durable(tmp_path):
    port = free_port()
    address = f"127.0.0.1:{port}"
    stall = tmp_path / "stall"
    log_path = tmp_path / "stalled-server.log"
    server = start_workload_server(
        "stalled_disk_server", [str(tmp_path / "data"), str(port), str(stall), "graceful"],
        address, str(log_path))
    outcomes: list = [None] * SENDERS
    clients = [Client(address, retries=0, request_timeout=60, connect_timeout=5)
               for _ in range(SENDERS)]
    try:
        for c in clients:  # each session established: its next SEND takes the short step
            c.call(Op.SEND, {"message": message_to_wire(Message("orders", b"first"))})
        stall.touch()  # the disk stops answering: the next flush waits for its fdatasync

        def send(i: int) -> None:
            try:
                outcomes[i] = clients[i].call(Op.SEND, {
                    "message": message_to_wire(Message("orders", b"at the stop %d" % i))})
            except Exception as exc:  # noqa: BLE001 - compared below
                outcomes[i] = exc

        senders = [threading.Thread(target=send, args=(i,)) for i in range(SENDERS)]
        for t in senders:
            t.start()
        with Client(address, retries=0) as probe:
            wait_until(lambda: server_stats(probe)["in_flight"] >= SENDERS, 30,
                       "the SENDs in flight")
        server.send_signal(signal.SIGTERM)
        wait_until(lambda: "stopping" in log_path.read_text(), 30, "the server stopping")
        os.unlink(stall)  # within the grace: the flush goes on
        for t in senders:
            t.join(60)
        assert not any(t.is_alive() for t in senders)
        assert server.wait(60) == 0
    finally:
        for c in clients:
            c.close()
        if stall.exists():
            os.unlink(stall)
        if server.poll() is None:
            server.kill()
            server.wait(10)
    log = log_path.read_text()
    for outcome in outcomes:
        assert isinstance(outcome, dict) and outcome["result"]["offset"] >= 0, (
            outcomes, log[-3000:])
