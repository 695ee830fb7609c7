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


def test_sizes_and_durations_may_carry_units(tmp_path):
    broker, server = load_config(write(tmp_path, {
        "segment_size": "64MiB", "tx_check_after_ms": "10s", "retention_ms": "2d",
        "retention_bytes": "10 GB", "tx_copy_threshold": "1KiB",
        "server": {"max_frame_size": "1MiB", "idle_timeout_ms": "1.5m"}}))
    assert broker.segment_size == 64 * 1024 * 1024 and broker.tx_check_after_ms == 10_000
    assert broker.retention_ms == 2 * 86_400_000 and broker.retention_bytes == 10 * 1000 ** 3
    assert broker.tx_copy_threshold == 1024
    assert server.max_frame_size == 1 << 20 and server.idle_timeout_ms == 90_000


@pytest.mark.parametrize("data, field, expected", [
    ({"segment_size": [64]}, "segment_size", "a size in bytes"),
    ({"segment_size": "64 parsecs"}, "segment_size", "a size in bytes"),
    ({"segment_size": "1.5B"}, "segment_size", "a size in bytes"),
    ({"tx_check_after_ms": "soon"}, "tx_check_after_ms", "a duration in milliseconds"),
    ({"queues_per_topic": "4"}, "queues_per_topic", "an integer"),
    ({"queues_per_topic": True}, "queues_per_topic", "an integer"),
    ({"flush_mode": 1}, "flush_mode", "a string"),
    ({"server": {"port": "9876x"}}, "port", "an integer"),
    ({"server": {"max_reply_size": {}}}, "max_reply_size", "a size in bytes"),
])
def test_a_value_of_the_wrong_type_names_the_field_and_the_type(tmp_path, data, field, expected):
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, data))
    message = str(caught.value)
    assert f"{field} must be {expected}" in message and "instances of" not in message


def test_a_toml_file_is_read_like_the_json_one(tmp_path):
    toml = tmp_path / "fmq.toml"
    toml.write_text('queues_per_topic = 8\nsegment_size = "16MiB"\n\n'
                    '[server]\nmax_connections = 5\nidle_timeout_ms = "10s"\n')
    as_json = write(tmp_path, {"queues_per_topic": 8, "segment_size": 16 << 20,
                               "server": {"max_connections": 5, "idle_timeout_ms": 10_000}})
    assert load_config(str(toml)) == load_config(as_json)
    broken = tmp_path / "broken.toml"
    broken.write_text("queues_per_topic = \n")
    with pytest.raises(ConfigError, match="cannot read config file .*broken.toml"):
        load_config(str(broken))


def test_fmq_server_reports_a_wrongly_typed_value_by_name(tmp_path):
    out = run_cli("server", "--data-dir", str(tmp_path / "d"), "--port", "0", "--config",
                  write(tmp_path, {"segment_size": "64 MiB per segment"}))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "segment_size must be a size in bytes" in out.stderr


def test_every_setting_is_documented():
    import dataclasses
    import os

    from fmq.config import BrokerConfig

    docs = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "operations.md")
    with open(docs, encoding="utf-8") as f:
        text = f.read()
    missing = [f.name for cls in (BrokerConfig, ServerConfig) for f in dataclasses.fields(cls)
               if f"`{f.name}`" not in text]
    assert missing == []
