from __future__ import annotations

import pytest
from kafka.net.inet import KafkaNetSocket

from tests.server.harness import ServerProcess, free_port


def _close_refused_sockets() -> None:
    """kafka-python (3.0) drops the socket of a connection that fails (refused, timed out)
    without closing it: the test that made a client reach a killed server left it open, and
    the ResourceWarning of its collection failed whichever test of the worker collected it
    (a CI failure in test_records). Close it where it fails, in the client's own step."""
    connect = KafkaNetSocket.sock_connect

    async def sock_connect(self, net, sock, sockaddr, timeout_at=None):  # noqa: ANN001, ANN202
        try:
            return await connect(self, net, sock, sockaddr, timeout_at=timeout_at)
        except BaseException:
            sock.close()
            raise

    KafkaNetSocket.sock_connect = sock_connect


_close_refused_sockets()


class KafkaServer(ServerProcess):
    """An ``fmq server`` with its Kafka port open (``bootstrap``: what Kafka clients get)."""

    def __init__(self, data_dir: str, config: dict | None = None,
                 client_options: dict | None = None) -> None:
        self.kafka_port = free_port()
        super().__init__(data_dir, config, client_options=client_options,
                         extra_args=("--kafka-port", str(self.kafka_port)))
        self.bootstrap = f"127.0.0.1:{self.kafka_port}"


@pytest.fixture
def kafka_server(tmp_path):
    """kafka_server(config=None) -> a running KafkaServer; all are killed at the end."""
    started: list[KafkaServer] = []

    def start(config: dict | None = None, name: str = "data") -> KafkaServer:
        srv = KafkaServer(str(tmp_path / name), config)
        started.append(srv)
        return srv.start()

    yield start
    for srv in started:
        srv.kill()


@pytest.fixture(scope="module")
def shared_kafka_server(tmp_path_factory):
    """One server for a whole module of tests (each test uses topics of its own)."""
    srv = KafkaServer(str(tmp_path_factory.mktemp("kafka") / "data"))
    srv.start()
    yield srv
    srv.kill()
