"""Kafka's topic config names as FMQ's topic settings (:class:`fmq.topic_config.TopicConfig`).

Three Kafka configs are FMQ settings a topic may have of its own: ``retention.ms``
(``retention_ms``), ``retention.bytes`` (``retention_bytes``: per partition in Kafka, per
queue in FMQ) and ``max.message.bytes`` (``max_message_size``). Every other name a client
may ask about is answered as a read-only default saying what FMQ does (``cleanup.policy``
``delete``, ``message.timestamp.type`` ``CreateTime``, ...); setting one is refused with
INVALID_CONFIG rather than ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from fmq.config import BrokerConfig
from fmq.topic_config import TopicConfig

#: DescribeConfigs' config_source values (Kafka's ConfigSource).
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
#: DescribeConfigs' config_type values (Kafka's ConfigType).
TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_BOOLEAN = 2, 3, 5, 1


class ConfigRefused(ValueError):
    """A config a client may not set here, or a value FMQ cannot take (INVALID_CONFIG)."""


@dataclass(frozen=True)
class SettableConfig:
    kafka_name: str
    field: str  # TopicConfig's field
    config_type: int
    doc: str


SETTABLE: dict[str, SettableConfig] = {c.kafka_name: c for c in (
    SettableConfig("retention.ms", "retention_ms", TYPE_LONG,
                   "how long a message is kept (FMQ: the topic's retention_ms)"),
    SettableConfig("retention.bytes", "retention_bytes", TYPE_LONG,
                   "the bytes a partition keeps (FMQ: the topic's retention_bytes per queue)"),
    SettableConfig("max.message.bytes", "max_message_size", TYPE_INT,
                   "the largest record (FMQ: the topic's max_message_size)"),
)}

#: What FMQ does where Kafka has a config it does not: reported, never settable.
READ_ONLY: dict[str, tuple[str, int]] = {
    "cleanup.policy": ("delete", TYPE_STRING),
    "compression.type": ("producer", TYPE_STRING),
    "message.timestamp.type": ("CreateTime", TYPE_STRING),
    "min.insync.replicas": ("1", TYPE_INT),
    "unclean.leader.election.enable": ("false", TYPE_BOOLEAN),
}


def parse_setting(name: str, value: str | None) -> tuple[str, int]:
    """(TopicConfig field, value) for Kafka config ``name`` set to ``value``; ConfigRefused
    saying why not."""
    config = SETTABLE.get(name)
    if config is None:
        settable = ", ".join(SETTABLE)
        raise ConfigRefused(f"config {name!r} is not one FMQ keeps per topic; FMQ takes "
                            f"{settable} (the others are reported as read-only defaults)")
    try:
        number = int(value or "")
    except ValueError:
        raise ConfigRefused(f"config {name} must be a whole number, not {value!r}") from None
    if number < 1:
        raise ConfigRefused(f"config {name} must be >= 1 (FMQ keeps no topic longer or larger "
                            f"than the broker does); delete the config to use the broker's "
                            f"setting, not {number}")
    return config.field, number


def settings_of(configs: list[tuple[str, str | None]]) -> dict[str, int]:
    """TopicConfig fields from CreateTopics' configs (name, value); ConfigRefused."""
    out: dict[str, int] = {}
    for name, value in configs:
        field, number = parse_setting(name, value)
        if field in out:
            raise ConfigRefused(f"config {name} is given twice")
        out[field] = number
    return out


def described(cfg: TopicConfig, broker: BrokerConfig, keys: tuple[str, ...] | None,
              with_docs: bool) -> list[dict]:
    """DescribeConfigs' entries of topic ``cfg`` (only ``keys`` when given)."""
    entries = []
    for config in SETTABLE.values():
        own = getattr(cfg, config.field)
        if own is not None:
            value, source = own, DYNAMIC_TOPIC_CONFIG
        else:
            value, source = _broker_value(config.field, broker), STATIC_BROKER_CONFIG
        entries.append(_entry(config.kafka_name, str(value), False, source, config.config_type,
                              config.doc if with_docs else None))
    for name, (value, config_type) in READ_ONLY.items():
        entries.append(_entry(name, value, True, DEFAULT_CONFIG, config_type,
                              "what FMQ does; not settable" if with_docs else None))
    if keys is not None:
        entries = [e for e in entries if e["name"] in keys]
    return entries


def _broker_value(field: str, broker: BrokerConfig) -> int:
    if field == "max_message_size":
        return broker.max_message_size
    if field == "retention_ms":
        return broker.retention_ms or -1  # 0: no time limit, Kafka's -1
    return -1  # retention_bytes: the broker's limit is for the whole log, none per queue


def _entry(name: str, value: str, read_only: bool, source: int, config_type: int,
           doc: str | None) -> dict:
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_default": source == DEFAULT_CONFIG, "is_sensitive": False, "synonyms": [],
            "config_type": config_type, "documentation": doc}
