"""A real etcd server for the tests: its own data dir, free ports on 127.0.0.1, stopped at the
end. ``.ci/run`` installs Debian's ``etcd-server``."""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass

from tests.server.harness import free_port

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


@dataclass(frozen=True)
class EtcdTLS:
    """etcd's client port with TLS, and clients must show a certificate signed by ``ca``."""

    ca: str
    cert: str  # etcd's server certificate (for 127.0.0.1)
    key: str
    client_cert: str  # a client certificate signed by ``ca`` and its key, for the health check
    client_key: str


class EtcdProcess:
    def __init__(self, data_dir: str, tls: EtcdTLS | None = None) -> None:
        self.data_dir = data_dir
        self.tls = tls
        self.client_port, self.peer_port = free_port(), free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The address FMQ takes (``--coordinator``); with TLS, with the CA and the client
        certificate of ``self.tls``."""
        if self.tls is None:
            return f"etcd://127.0.0.1:{self.client_port}"
        return self.tls_url(self.tls.ca, self.tls.client_cert, self.tls.client_key)

    def tls_url(self, ca: str | None, cert: str | None, key: str | None) -> str:
        files = "&".join(f"{name}={path}" for name, path in
                         (("ca", ca), ("cert", cert), ("key", key)) if path)
        return f"etcds://127.0.0.1:{self.client_port}" + (f"?{files}" if files else "")

    def _tls_args(self) -> list[str]:
        if self.tls is None:
            return []
        return ["--cert-file", self.tls.cert, "--key-file", self.tls.key,
                "--client-cert-auth", "--trusted-ca-file", self.tls.ca]

    def _health_context(self) -> ssl.SSLContext | None:
        if self.tls is None:
            return None
        context = ssl.create_default_context(cafile=self.tls.ca)
        context.load_cert_chain(self.tls.client_cert, self.tls.client_key)
        return context

    def start(self, timeout: float = 30.0) -> EtcdProcess:
        scheme = "https" if self.tls is not None else "http"
        client = f"{scheme}://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        log = open(os.path.join(os.path.dirname(self.data_dir), "etcd.log"), "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [ETCD, "--name", "fmq-test", "--data-dir", self.data_dir,
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"fmq-test={peer}", *self._tls_args()],
            stdout=log, stderr=log)
        log.close()
        context = self._health_context()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see etcd.log")
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1,
                                            context=context) as answer:
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
