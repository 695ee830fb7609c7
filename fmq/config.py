"""Broker configuration: every size and interval comes in through :class:`BrokerConfig`.

Also the reading of configuration files (JSON or TOML) and the typing of their values: a
size may be written with a unit (``"64MiB"``), a duration too (``"10s"``), and a value of the
wrong type is refused naming the field and what it takes.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from dataclasses import dataclass
from typing import Any

from fmq.errors import ConfigError
from fmq.log.record import HEADER_SIZE

MiB = 1024 * 1024


@dataclass(frozen=True)
class BrokerConfig:
    #: Maximum bytes of one segment file (files are preallocated to this size).
    segment_size: int = 64 * MiB
    #: Queues a topic has; messages spread over them by key hash or round robin.
    queues_per_topic: int = 4
    #: A send to a topic nobody created creates it (with the defaults); false: it is
    #: refused (UnknownTopic) until ``fmq topic create`` makes the topic.
    auto_create_topics: bool = True
    #: "sync": acknowledge after fdatasync (group commit). "async": acknowledge plain
    #: messages once written to the OS; a background flush runs every ``flush_interval_ms``.
    #: Transactions always flush synchronously.
    flush_mode: str = "sync"
    flush_interval_ms: int = 50
    #: Largest message body accepted, in bytes.
    max_message_size: int = 4 * MiB
    #: Whole segments older than this are deleted (0 = keep forever).
    retention_ms: int = 0
    #: Oldest segments are deleted while the log is larger than this (0 = no limit).
    retention_bytes: int = 0
    #: How often retention runs in the background (0 = only when called).
    retention_interval_ms: int = 60_000
    #: How often a checkpoint is written in the background (0 = only at close / on demand).
    checkpoint_interval_ms: int = 10_000
    #: LMDB map size to start with; it grows on demand.
    index_map_size: int = 1 << 30
    #: Records per LMDB write transaction in the dispatcher.
    dispatch_batch: int = 4096
    #: Index entries handed from the write path to the dispatcher in memory; beyond this
    #: backlog the dispatcher reads the flushed log instead until it catches up.
    dispatch_max_pending: int = 200_000
    #: Sends and prepares are refused with IndexUnavailable while the index lags the flushed
    #: log by more than this many bytes (0 = no limit). They are always refused while index
    #: writes fail (e.g. a full disk).
    index_max_lag_bytes: int = 256 * MiB
    #: First and longest wait between two attempts of an index write that failed with a
    #: transient error (ENOSPC, EIO); the wait doubles from one to the other.
    index_retry_initial_ms: int = 50
    index_retry_max_ms: int = 5_000
    #: Who writes the flushed log into the index: "thread" (a thread of the broker) or
    #: "process" (an indexer process the broker starts and restarts, which reads the flushed
    #: records from the segment files; no broker thread competes with the event loop for
    #: the interpreter lock while LMDB writes).
    index_writer: str = "thread"
    #: Open-transaction limit; prepare beyond it raises TooManyTransactions.
    max_open_transactions: int = 10_000
    #: Bodies below this many bytes are copied into TX_MESSAGE records at commit.
    tx_copy_threshold: int = 256
    #: An open transaction older than this is offered to feedback polls.
    tx_check_after_ms: int = 6_000
    #: Longest back-off between two feedback offers of the same transaction.
    tx_check_max_interval_ms: int = 60_000
    #: Longest feedback lease a poller gets; a longer ``lease_ms`` is lowered to it, so no
    #: poller can keep a transaction from its producers for longer.
    max_feedback_lease_ms: int = 60_000
    #: Finished transaction ids remembered for idempotent commit/rollback answers.
    tx_finished_memory: int = 100_000
    #: Messages one transaction may hold.
    max_messages_per_transaction: int = 10_000
    #: Roll back a transaction still open this long after this broker learned of it (its
    #: prepare, or the restart that recovered it), whatever feedback got: 0 = never, the
    #: default (the broker never decides on its own unless told to).
    tx_timeout_ms: int = 0
    #: Replication (docs/replication.md). "HOST:PORT" of the primary this broker follows:
    #: it copies that log and takes no writes of its own. Empty: this broker is a primary.
    follow: str = ""
    #: "async": acknowledge after the primary's own fsync (followers trail). "sync":
    #: acknowledge a send, prepare, commit or rollback only once ``min_insync`` followers
    #: have fsynced past its records.
    ack_mode: str = "async"
    #: Followers that must hold a record before it is acknowledged in ``sync`` mode.
    min_insync: int = 1
    #: A follower whose durable offset is more than this many bytes behind the primary's,
    #: or that has not reported for ``max_lag_ms``, leaves the in-sync set.
    max_lag_bytes: int = 64 * MiB
    max_lag_ms: int = 10_000
    #: The least time between two looks of the timer service for due scheduled messages
    #: (it sleeps until the next is due or a new one is indexed), and how many it delivers
    #: per round.
    timer_poll_ms: int = 10
    timer_batch: int = 1024
    #: Back-off before each redelivery of a message a consumer failed (nack), one level per
    #: attempt (the last repeats), as durations separated by spaces.
    retry_delays: str = "10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    #: Redeliveries before a failed message goes to its group's dead-letter topic.
    max_reconsume_times: int = 16
    #: Idempotent producers: sequence numbers remembered per producer id (a resend of one
    #: is answered with the original's result; a lower one is refused), and how long a
    #: producer id is remembered after its last message. Recovery replays the log back to
    #: the oldest message remembered, so a long window makes a restart slower.
    dedup_window_messages: int = 10_000
    dedup_window_ms: int = 120_000
    #: Application dedup keys (the ``%msgid`` property) remembered, over all topics, each
    #: for ``dedup_window_ms`` at most.
    dedup_max_message_ids: int = 100_000

    def __post_init__(self) -> None:
        coerce_fields(self, "invalid configuration")
        self.validate()

    def validate(self) -> None:
        need = require

        need(self.segment_size >= 4096, "segment_size must be at least 4096 bytes")
        need(self.segment_size <= 1 << 40, "segment_size must be at most 1 TiB")
        need(1 <= self.queues_per_topic <= 65_535, "queues_per_topic must be in 1..65535")
        need(self.flush_mode in ("sync", "async"), "flush_mode must be 'sync' or 'async'")
        need(self.flush_interval_ms > 0, "flush_interval_ms must be > 0")
        need(self.max_message_size >= 1, "max_message_size must be >= 1")
        need(
            self.max_message_size + 2 * HEADER_SIZE + 1024 <= self.segment_size,
            f"max_message_size ({self.max_message_size}) plus record overhead must fit in a "
            f"segment ({self.segment_size}); raise segment_size or lower max_message_size",
        )
        for name in ("retention_ms", "retention_bytes", "retention_interval_ms",
                     "checkpoint_interval_ms", "tx_copy_threshold", "tx_timeout_ms"):
            need(getattr(self, name) >= 0, f"{name} must be >= 0")
        need(self.index_map_size >= 1 * MiB, "index_map_size must be at least 1 MiB")
        need(self.dispatch_batch >= 1, "dispatch_batch must be >= 1")
        need(self.dispatch_max_pending >= 1, "dispatch_max_pending must be >= 1")
        need(self.index_max_lag_bytes >= 0, "index_max_lag_bytes must be >= 0 (0 = no limit)")
        need(self.index_retry_initial_ms >= 1, "index_retry_initial_ms must be >= 1")
        need(self.index_retry_max_ms >= self.index_retry_initial_ms,
             "index_retry_max_ms must be >= index_retry_initial_ms")
        need(self.index_writer in ("thread", "process"),
             "index_writer must be 'thread' or 'process'")
        need(self.max_open_transactions >= 1, "max_open_transactions must be >= 1")
        need(self.tx_check_after_ms >= 0, "tx_check_after_ms must be >= 0")
        need(self.tx_check_max_interval_ms >= 1, "tx_check_max_interval_ms must be >= 1")
        need(self.max_feedback_lease_ms >= 1, "max_feedback_lease_ms must be >= 1")
        need(self.tx_finished_memory >= 0, "tx_finished_memory must be >= 0")
        need(self.max_messages_per_transaction >= 1, "max_messages_per_transaction must be >= 1")
        need(self.ack_mode in ("sync", "async"), "ack_mode must be 'sync' or 'async'")
        need(self.min_insync >= 1, "min_insync must be >= 1")
        need(self.max_lag_bytes >= 1, "max_lag_bytes must be >= 1")
        need(self.max_lag_ms >= 100, "max_lag_ms must be >= 100")
        need(not self.follow or ":" in self.follow,
             "follow must be HOST:PORT of the primary (or empty)")
        need(self.timer_poll_ms >= 1, "timer_poll_ms must be >= 1")
        need(self.timer_batch >= 1, "timer_batch must be >= 1")
        need(self.max_reconsume_times >= 0, "max_reconsume_times must be >= 0")
        need(self.dedup_window_messages >= 1, "dedup_window_messages must be >= 1")
        need(self.dedup_window_ms >= 1, "dedup_window_ms must be >= 1")
        need(self.dedup_max_message_ids >= 0, "dedup_max_message_ids must be >= 0")
        self.retry_delays_ms  # noqa: B018 - parsed now, so a bad level is refused at start

    @property
    def retry_delays_ms(self) -> tuple[int, ...]:
        """The ``retry_delays`` levels in milliseconds."""
        levels = tuple(coerce_value("retry_delays", "duration", part, "invalid configuration")
                       for part in self.retry_delays.split())
        require(bool(levels) and all(v >= 0 for v in levels),
                "retry_delays must list at least one duration, e.g. \"10s 30s 1m\"")
        return levels

    @property
    def max_record_size(self) -> int:
        """Largest record the decoder accepts: a record never exceeds its segment."""
        return self.segment_size

    def replace(self, **changes: Any) -> BrokerConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_json_file(cls, path: str) -> BrokerConfig:
        """Load a JSON object of field names to values; unknown names are an error."""
        return build_config(cls, read_json_object(path), f"config file {path}")


def require(ok: bool, what: str, subject: str = "configuration") -> None:
    """Raise ConfigError naming the rule ``what`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"invalid {subject}: {what}")


def read_json_object(path: str) -> dict:
    """The JSON object in ``path``, or a ConfigError that says what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a JSON object")
    return data


def read_config_file(path: str) -> dict:
    """The table in a config file: TOML when ``path`` ends in ``.toml``, else JSON."""
    if not path.endswith(".toml"):
        return read_json_object(path)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None


_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": MiB, "mb": 1000 ** 2,
               "mib": MiB, "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30, "t": 1 << 40,
               "tb": 1000 ** 4, "tib": 1 << 40}
_DURATION_UNITS_MS = {"": 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                      "d": 86_400_000}
_WITH_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def value_kind(name: str, annotation: Any) -> str:
    """What a config field holds: "size" (bytes), "duration" (milliseconds), "integer" or
    "string"; told by its name (``*_ms``, ``*_size``, ``*_bytes``, ``*budget*``) and type."""
    if annotation in (str, "str"):
        return "string"
    if annotation in (bool, "bool"):
        return "boolean"
    if name.endswith("_ms"):
        return "duration"
    if name.endswith(("_size", "_bytes", "_threshold")) or "budget" in name:
        return "size"
    return "integer"


_EXPECTED = {
    "size": 'a size in bytes: an integer or a string with a unit (B, KiB, MiB, GiB, TiB; '
            'KB, MB, GB, TB are powers of 1000), e.g. 67108864 or "64MiB"',
    "duration": 'a duration in milliseconds: an integer or a string with a unit (ms, s, m, '
                'h, d), e.g. 10000 or "10s"',
    "integer": "an integer",
    "string": "a string",
    "boolean": "true or false",
}


def expected_form(kind: str) -> str:
    """What a value of ``kind`` (size, duration, integer, string, boolean) must be, in the
    words of the errors that refuse one."""
    return _EXPECTED[kind]


def coerce_value(name: str, kind: str, value: Any, where: str) -> Any:
    """``value`` as the field ``name`` of ``kind`` takes it, or a ConfigError naming the
    field, what it takes, and what was given."""
    def refuse() -> ConfigError:
        return ConfigError(f"{where}: {name} must be {_EXPECTED[kind]}, not {value!r}")

    if kind == "string":
        if not isinstance(value, str):
            raise refuse()
        return value
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise refuse()
    if isinstance(value, bool):
        raise refuse()
    if isinstance(value, int):
        return value
    if kind == "integer" or not isinstance(value, str):
        raise refuse()
    m = _WITH_UNIT.match(value)
    units = _SIZE_UNITS if kind == "size" else _DURATION_UNITS_MS
    if not m or m.group(2).lower() not in units:
        raise refuse()
    number = float(m.group(1)) * units[m.group(2).lower()]
    if number != int(number):
        raise refuse()
    return int(number)


def coerce_fields(config: Any, where: str) -> None:
    """Type every field of a frozen config dataclass in place (units allowed), so that a
    value of the wrong type is refused by name before any rule compares it."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        typed = coerce_value(f.name, value_kind(f.name, f.type), value, where)
        if typed is not value:
            object.__setattr__(config, f.name, typed)


def build_config(cls: type, data: dict, where: str) -> Any:
    """``cls(**data)`` for a config dataclass; unknown keys are an error, so a typo never
    silently falls back to a default; sizes and durations may carry units."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown keys {', '.join(unknown)}; known keys: "
                          f"{', '.join(sorted(fields))}")
    typed = {name: coerce_value(name, value_kind(name, fields[name].type), value, where)
             for name, value in data.items()}
    try:
        return cls(**typed)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None
