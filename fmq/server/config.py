"""Server limits and the ``--config FILE`` loader.

The config file is one JSON object: BrokerConfig field names at the top level (see
:class:`fmq.config.BrokerConfig`), and optionally a ``"server"`` object with
:class:`ServerConfig` field names. Unknown names are an error, so a typo never silently
falls back to a default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fmq.config import BrokerConfig, build_config, read_json_object, require
from fmq.errors import ConfigError

MiB = 1024 * 1024


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 9876
    #: Largest frame accepted (the length field); bigger → error response, connection closed.
    max_frame_size: int = 64 * MiB
    #: Connections open at once; one more gets a ServerBusy error and is closed. Lowered at
    #: start (with a warning) when it does not fit under the open-file limit.
    max_connections: int = 1024
    #: Descriptors kept free beyond those open at start, for new log segments, the directory
    #: fsync of a roll, checkpoints and the event loop (docs/operations.md).
    descriptor_reserve: int = 64
    #: Requests one connection may have in flight; beyond it → ServerBusy (retriable).
    max_in_flight: int = 256
    #: Threads running blocking broker calls (fsync waits, LMDB). Many threads let requests
    #: of every connection join one group commit.
    worker_threads: int = 64
    #: Separate threads for feedback long polls, so they never starve sends.
    long_poll_threads: int = 16
    #: Longest wait_ms honoured for pull and feedback long polls.
    max_wait_ms: int = 30_000
    #: A consumer-group member that sends no heartbeat for this long is dropped.
    group_session_timeout_ms: int = 10_000
    #: Heartbeat interval the server asks group members to keep.
    group_heartbeat_interval_ms: int = 1_000
    #: On SIGTERM/SIGINT, in-flight requests get this long to finish.
    shutdown_grace_ms: int = 30_000

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            require(ok, what, "server configuration")

        need(0 <= self.port <= 65_535, "port must be in 0..65535")
        need(4096 <= self.max_frame_size <= 0xFFFF_FFFF,
             "max_frame_size must be in 4096..4294967295")
        for name in ("max_connections", "max_in_flight", "worker_threads", "long_poll_threads",
                     "group_session_timeout_ms", "group_heartbeat_interval_ms"):
            need(getattr(self, name) >= 1, f"{name} must be >= 1")
        need(self.max_wait_ms >= 0, "max_wait_ms must be >= 0")
        need(self.descriptor_reserve >= 16, "descriptor_reserve must be >= 16")
        need(self.shutdown_grace_ms >= 0, "shutdown_grace_ms must be >= 0")
        need(self.group_heartbeat_interval_ms < self.group_session_timeout_ms,
             "group_heartbeat_interval_ms must be below group_session_timeout_ms")

    def replace(self, **changes: Any) -> ServerConfig:
        return dataclasses.replace(self, **changes)


def load_config(path: str | None) -> tuple[BrokerConfig, ServerConfig]:
    """Read ``path`` (None → defaults) into a broker and a server configuration."""
    if path is None:
        return BrokerConfig(), ServerConfig()
    data = read_json_object(path)
    server = data.pop("server", {})
    if not isinstance(server, dict):
        raise ConfigError(f"config file {path}: \"server\" must be a JSON object")
    return (build_config(BrokerConfig, data, f"broker config in {path}"),
            build_config(ServerConfig, server, f"\"server\" config in {path}"))
