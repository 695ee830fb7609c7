"""A real ``fmq server`` subprocess on 127.0.0.1 and a random free port, for the tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

from fmq.client import Client
from fmq.errors import FMQError
from fmq.protocol import Op

FMQ = [sys.executable, "-m", "fmq.cli.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(*args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*FMQ, *args], input=input, capture_output=True, text=True,
                          timeout=timeout, check=False)


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def broker_stats(server: str | Client) -> dict:
    """A running server's whole STATS object; ``server`` is its address or a client already
    connected (and logged in) to it."""
    if isinstance(server, Client):
        return json.loads(server.call(Op.STATS, {})["json"])
    with Client(server, retries=3, request_timeout=30) as c:
        return json.loads(c.call(Op.STATS, {})["json"])


def server_stats(server: str | Client) -> dict:
    """The ``server`` part of a running server's STATS."""
    return broker_stats(server)["server"]


def messages_stored(address: str, topic: str) -> int:
    """How many messages the server at ``address`` holds in ``topic``, all its queues."""
    with Client(address) as c:
        queues = c.ping()["queues_per_topic"]
        return sum(c.call(Op.QUEUE_RANGE, {"topic": topic, "queue_id": q})["next_offset"]
                   for q in range(queues))


def wait_until(cond: Callable[[], object], timeout: float = 10.0, what: str = "the condition",
               tick: Callable[[], object] | None = None) -> None:
    """Return once ``cond()`` is true; fail the test after ``timeout`` seconds. ``tick``, if
    given, runs before each look (to drive a clock or a poll loop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tick is not None:
            tick()
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def closed_by_server(s: socket.socket, limit: float) -> bool:
    """Whether the server closes ``s`` within ``limit`` seconds (answers are read and
    dropped meanwhile)."""
    s.settimeout(0.2)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if not s.recv(65536):
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


def wait_until_serving(address: str, proc: subprocess.Popen, timeout: float,
                       **client_options) -> bool:
    """Ping ``address`` until it answers (True) or ``proc`` exits (False); raises
    TimeoutError when neither happens within ``timeout`` seconds. ``client_options``: of the
    pinging client (TLS, credentials)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with Client(address, retries=0, connect_timeout=0.5, request_timeout=2,
                        **client_options) as c:
                c.ping()
            return True
        except FMQError:
            time.sleep(0.05)
    raise TimeoutError(f"the server at {address} did not answer within {timeout}s")


def start_workload_server(module: str, args: list[str], address: str, log_path: str,
                          timeout: float = 30.0) -> subprocess.Popen:
    """Start ``python -m tests.workloads.<module> ARGS``, a server answering at ``address``,
    its output appended to ``log_path``; return once it answers. A child that exits first
    fails the test with the end of its log; one that never answers is killed."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(log_path, "a") as log:
        proc = subprocess.Popen([sys.executable, "-m", f"tests.workloads.{module}", *args],
                                cwd=root, stdout=log, stderr=log)
    try:
        serving = wait_until_serving(address, proc, timeout)
    except TimeoutError:
        proc.kill()
        proc.wait(10)
        raise
    if not serving:
        with open(log_path) as log:
            raise AssertionError(f"{module} exited before serving:\n{log.read()[-3000:]}")
    return proc


class ServerProcess:
    def __init__(self, data_dir: str, config: dict | None = None, port: int | None = None,
                 client_options: dict | None = None, extra_args: tuple[str, ...] = (),
                 program: list[str] | None = None) -> None:
        #: What a client needs to reach this server (TLS, credentials), for the readiness ping.
        self.client_options = client_options or {}
        #: The command line before ``server``: ``fmq``, or a workload wrapping it.
        self.program = program or FMQ
        self.extra_args = extra_args
        self.data_dir = str(data_dir)
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.config_path = None
        if config is not None:
            self.config_path = os.path.join(os.path.dirname(self.data_dir),
                                            f"config-{self.port}.json")
            with open(self.config_path, "w") as f:
                json.dump(config, f)
        self.log_path = os.path.join(os.path.dirname(self.data_dir), f"server-{self.port}.log")
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout: float = 30.0) -> ServerProcess:
        args = [*self.program, "server", "--data-dir", self.data_dir, "--host", "127.0.0.1",
                "--port", str(self.port)]
        if self.config_path:
            args += ["--config", self.config_path]
        args += self.extra_args
        self.starts += 1
        log = open(self.log_path, "a")  # noqa: SIM115 - the child owns it
        log.write(f"---- start {self.starts}\n")
        log.flush()
        self.proc = subprocess.Popen(args, stdout=log, stderr=log)
        log.close()
        try:
            if wait_until_serving(self.address, self.proc, timeout, **self.client_options):
                return self
        except TimeoutError:
            self.kill()
            raise RuntimeError(f"fmq server did not answer within {timeout}s:\n{self.log()}") \
                from None
        raise RuntimeError(f"fmq server exited with {self.proc.returncode}:\n{self.log()}")

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the graceful shutdown path."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
