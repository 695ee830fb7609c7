"""A real etcd server for the tests: its own data dir, free ports on 127.0.0.1, stopped at the
end. ``.ci/run`` installs Debian's ``etcd-server``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request

from tests.server.harness import free_port

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


class EtcdProcess:
    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.client_port, self.peer_port = free_port(), free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The address FMQ takes (``--coordinator``)."""
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> EtcdProcess:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        log = open(os.path.join(os.path.dirname(self.data_dir), "etcd.log"), "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [ETCD, "--name", "fmq-test", "--data-dir", self.data_dir,
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"fmq-test={peer}"], stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see etcd.log")
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1) as answer:
                    if b'"true"' in answer.read():
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("etcd did not become healthy in time")

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=30)
