"""The server under a low open-file limit (RLIMIT_NOFILE), for real.

A server subprocess starts with its limit lowered (``resource.setrlimit`` in the child) and
the default ``max_connections`` (1024) above it. With a hard limit that allows it, the
server raises its soft limit; without, it lowers max_connections and says so. Then idle
connections flood it beyond the limit and a producer sends enough to roll segments: no
send may fail the log (LogFailed), extra connections get ServerBusy, and sends keep
working after the idle connections close.
"""

from __future__ import annotations

import json
import os
import re
import resource
import select
import socket
import subprocess
import time

import pytest

import fmq
from fmq.client import Client, Producer
from fmq.errors import FMQError, ServerBusy
from fmq.protocol import Op
from fmq.protocol.frame import FrameDecoder, decode_error, encode_request

from .harness import FMQ, free_port, server_stats, wait_until_serving

CONFIG = {"segment_size": 64 * 1024, "max_message_size": 8192, "checkpoint_interval_ms": 0}
BODY = 3000


class LimitedServer:
    """``fmq server`` started with RLIMIT_NOFILE = (soft, hard)."""

    def __init__(self, tmp_path, soft: int, hard: int) -> None:
        self.data_dir = str(tmp_path / "data")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = str(tmp_path / "server.log")
        config_path = str(tmp_path / "config.json")
        with open(config_path, "w") as f:
            json.dump(CONFIG, f)
        self.args = [*FMQ, "server", "--data-dir", self.data_dir, "--host", "127.0.0.1",
                     "--port", str(self.port), "--config", config_path]
        self.limits = (soft, hard)
        self.proc: subprocess.Popen | None = None

    def _lower_limit(self) -> None:  # runs in the child, before exec
        resource.setrlimit(resource.RLIMIT_NOFILE, self.limits)

    def start(self, timeout: float = 30.0) -> LimitedServer:
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=log,
                                         preexec_fn=self._lower_limit)
        try:
            wait_until_serving(self.address, self.proc, timeout)  # or it exited: the test looks
        except TimeoutError:
            raise RuntimeError(f"server did not answer within {timeout}s:\n{self.log()}") \
                from None
        return self

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def soft_limit(self) -> int:
        with open(f"/proc/{self.proc.pid}/limits") as f:
            line = next(x for x in f if x.startswith("Max open files"))
        return int(line.split()[3])

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def limited(tmp_path):
    servers: list[LimitedServer] = []

    def start(soft: int, hard: int) -> LimitedServer:
        srv = LimitedServer(tmp_path, soft, hard)
        servers.append(srv)
        return srv.start()

    yield start
    for srv in servers:
        srv.kill()


def _connections(client: Client) -> int:
    return server_stats(client)["connections"]


def _send_counting(producer: Producer, counts: dict, acked: list, tag: str, n: int) -> None:
    for i in range(n):
        mid = f"{tag}-{i}"
        try:
            r = producer.send("orders", mid.encode().ljust(BODY, b"."))
        except fmq.LogFailed:
            counts["log_failed"] += 1
        except fmq.SegmentUnavailable:  # retried by the client and still refused
            counts["unavailable"] += 1
        except FMQError as exc:
            counts.setdefault("other", []).append(repr(exc))
        else:
            counts["ok"] += 1
            acked.append((mid, r))


def flood_then_send(address: str, idle: int, sends: int, settle: float = 30.0,
                    retries: int = 5) -> dict:
    """Open ``idle`` idle connections next to one producer, send ``sends`` messages (they roll
    segments), close the idle connections, send 10 more. Returns the counts (an ad-hoc
    script runs the issue's 1224 connections under `ulimit -n 1024` with it)."""
    host, port = address.rsplit(":", 1)
    counts = {"ok": 0, "log_failed": 0, "unavailable": 0, "busy": 0, "connect_failed": 0}
    acked: list = []
    with Producer(address, retries=retries, request_timeout=30) as producer:
        producer.ping()
        socks: list[socket.socket] = []
        for _ in range(idle):
            try:
                sock = socket.create_connection((host, int(port)), timeout=2)
            except OSError:
                counts["connect_failed"] += 1
                continue
            # One PING makes it an established connection (one that never sends a request
            # is a pending one, capped separately by max_pending_connections); then idle.
            try:
                sock.sendall(encode_request(Op.PING, 1, {}))
            except OSError:  # refused at connect (ServerBusy, then closed) before our PING
                counts["refused_at_connect"] = counts.get("refused_at_connect", 0) + 1
                sock.close()
                continue
            socks.append(sock)
        # Wait (bounded) until the server accepted or refused every one of them.
        by_fd = {s.fileno(): s for s in socks}
        received = {fd: bytearray() for fd in by_fd}
        poller = select.poll()  # not select(): descriptors may exceed FD_SETSIZE
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        closed = 0
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            for fd, _event in poller.poll(200):
                try:
                    data = by_fd[fd].recv(65536)
                except ConnectionResetError:  # closed with our PING unread: a refusal
                    data = b""
                if data:
                    received[fd] += data
                    continue
                poller.unregister(fd)  # closed by the server: what did it say first?
                closed += 1
                counts["closed"] = closed
                frames = FrameDecoder().feed(bytes(received[fd]))
                if frames and isinstance(decode_error(frames[0]), ServerBusy):
                    counts["busy"] += 1
            if closed + _connections(producer) - 1 >= len(socks):
                break
        counts["accepted_idle"] = _connections(producer) - 1
        _send_counting(producer, counts, acked, "flooded", sends)
        for s in socks:
            s.close()
        deadline = time.monotonic() + settle
        while _connections(producer) > 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        _send_counting(producer, counts, acked, "after", 10)
    counts["acked"] = acked
    return counts


def test_low_hard_limit_lowers_max_connections_and_sends_never_fail_the_log(limited):
    srv = limited(256, 256)
    assert srv.proc.poll() is None, srv.log()
    counts = flood_then_send(srv.address, idle=300, sends=60)
    assert counts["log_failed"] == 0, f"sends failed the log: {counts}\n{srv.log()[-3000:]}"
    assert counts.get("other") is None, counts
    assert counts["ok"] == 70 and counts["unavailable"] == 0, counts
    found = re.search(r"max_connections lowered from 1024 to (\d+)", srv.log())
    assert found, f"no warning about the lowered max_connections:\n{srv.log()}"
    allowed = int(found.group(1))
    print(f"limit 256: max_connections {allowed}, {counts['busy']} of 300 idle connections "
          f"refused with ServerBusy, {counts['ok']} sends ok, {counts['log_failed']} LogFailed")
    assert 0 < allowed <= 256 - 64
    assert counts["accepted_idle"] == allowed - 1  # the producer holds one
    # Every other idle connection was refused: with ServerBusy, or closed at connect.
    refused = counts.get("closed", 0) + counts.get("refused_at_connect", 0)
    assert refused == 300 - (allowed - 1) and counts["busy"] > 0, counts
    srv.proc.terminate()
    assert srv.proc.wait(30) == 0, srv.log()
    with fmq.Broker.open(srv.data_dir, fmq.BrokerConfig(**CONFIG)) as b:
        assert b.wait_indexed(30)
        assert len(b._log.segments) >= 3  # the sends did roll segments
        for mid, r in counts["acked"]:
            got = b.reads.pull("orders", r.queue_id, r.queue_offset, 1)
            assert got and bytes(got[0].body).startswith(mid.encode() + b"."), mid


def test_soft_limit_is_raised_toward_the_hard_limit(limited):
    srv = limited(256, 4096)
    assert srv.proc.poll() is None, srv.log()
    assert srv.soft_limit() >= 1024 + 64
    assert "raised the open-file limit (RLIMIT_NOFILE) from 256 to" in srv.log()
    assert "max_connections lowered" not in srv.log()


def test_a_limit_too_low_for_any_connection_refuses_to_start(limited):
    srv = limited(48, 48)
    assert srv.proc.wait(30) != 0
    out = srv.log()
    assert "open-file limit (48, hard 48) leaves no descriptor for connections" in out, out
    assert "Traceback" not in out
    if os.path.exists(os.path.join(srv.data_dir, "lock")):  # released: another start works
        with fmq.Broker.open(srv.data_dir, fmq.BrokerConfig(**CONFIG)):
            pass
