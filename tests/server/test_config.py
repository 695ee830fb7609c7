"""The server's --config file: broker fields at the top, server limits under "server"."""

from __future__ import annotations

import json

import pytest

from fmq.errors import ConfigError
from fmq.server.config import ServerConfig, load_config

from .harness import run_cli


def write(tmp_path, data) -> str:
    path = tmp_path / "fmq.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_defaults_without_a_file():
    broker, server = load_config(None)
    assert server == ServerConfig() and server.port == 9876 and server.host == "127.0.0.1"
    assert broker.queues_per_topic == 4


def test_broker_and_server_fields(tmp_path):
    broker, server = load_config(write(tmp_path, {
        "queues_per_topic": 8, "tx_check_after_ms": 100,
        "server": {"max_connections": 5, "max_frame_size": 1 << 20}}))
    assert (broker.queues_per_topic, broker.tx_check_after_ms) == (8, 100)
    assert (server.max_connections, server.max_frame_size) == (5, 1 << 20)


@pytest.mark.parametrize("data, match", [
    ({"queues_per_tpic": 8}, "broker config in .*: unknown keys queues_per_tpic"),
    ({"server": {"max_conections": 1}}, "\"server\" config in .*: unknown keys max_conections"),
    ({"server": {"max_in_flight": 0}}, "max_in_flight must be >= 1"),
    ({"server": {"max_frame_size": 100}}, "max_frame_size"),
    ({"server": []}, "must be a JSON object"),
    ([1, 2], "must hold a JSON object"),
])
def test_bad_files_are_refused_with_the_reason(tmp_path, data, match):
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, data))


def test_fmq_server_reports_a_bad_config_and_exits_1(tmp_path):
    out = run_cli("server", "--data-dir", str(tmp_path / "d"), "--port", "0", "--config",
                  write(tmp_path, {"server": {"max_wait_ms": -1}}))
    assert out.returncode == 1
    assert "max_wait_ms must be >= 0" in out.stderr
    assert "Traceback" not in out.stderr
