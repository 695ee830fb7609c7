"""A topic's settings as one typed value: what a TOPIC record stores, what the index keeps,
what the wire, the client and ``fmq topic`` speak (docs/operations.md, "Topics").

A setting left ``None`` follows the broker's configuration (``retention_ms``,
``retention_bytes``, ``max_message_size``). The record carries the whole value after each
change, so the latest record wins and replaying one twice changes nothing.

A later setting (a route to broker groups, say) is one more field here with a default:
older records lack it and read as the default, and every command that speaks this value
gets it without a second set of commands.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace

from fmq.errors import InvalidArgument
from fmq.message import check_topic
from fmq.topic_route import MAX_QUEUES_PER_GROUP

CREATED = "created"
DELETED = "deleted"
#: The property of a TOPIC record holding :meth:`TopicConfig.to_json`.
CONFIG_PROPERTY = "config"
#: A topic's queues in one broker group (the same bound a route keeps per group).
MAX_QUEUES = MAX_QUEUES_PER_GROUP


@dataclass(frozen=True)
class TopicConfig:
    name: str
    queues: int
    retention_ms: int | None = None  # None: the broker's retention_ms
    retention_bytes: int | None = None  # per queue; None: none of its own
    max_message_size: int | None = None  # None: the broker's max_message_size
    state: str = CREATED
    #: Per queue id, the lowest queue offset still readable: set when the topic is deleted
    #: (each queue's next offset then), kept when it is created again.
    floors: dict[int, int] = field(default_factory=dict)

    @property
    def deleted(self) -> bool:
        return self.state == DELETED

    def changed(self, **changes: object) -> TopicConfig:
        return replace(self, **changes)

    def to_json(self) -> str:
        d = asdict(self)
        d["floors"] = {str(q): n for q, n in sorted(self.floors.items())}
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> TopicConfig:
        try:
            d = json.loads(text)
            return cls(name=str(d["name"]), queues=int(d["queues"]),
                       retention_ms=_opt_int(d.get("retention_ms")),
                       retention_bytes=_opt_int(d.get("retention_bytes")),
                       max_message_size=_opt_int(d.get("max_message_size")),
                       state=str(d.get("state", CREATED)),
                       floors={int(q): int(n) for q, n in (d.get("floors") or {}).items()})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidArgument(f"a topic configuration is not valid JSON of a topic: {exc}"
                                  ) from None

    def to_wire_dict(self) -> dict:
        """What ``describe`` and ``list`` answer (JSON-ready; floors as a list)."""
        d = asdict(self)
        d["floors"] = sorted([q, n] for q, n in self.floors.items())
        return d


def _opt_int(value: object) -> int | None:
    return None if value is None else int(value)


def check_topic_settings(name: str, queues: int | None, retention_ms: int | None,
                         retention_bytes: int | None, max_message_size: int | None) -> None:
    """Each given setting in range (InvalidArgument saying which and why)."""
    check_topic(name)
    if queues is not None and not 1 <= queues <= MAX_QUEUES:
        raise InvalidArgument(f"a topic has 1..{MAX_QUEUES} queues, not {queues}")
    for what, value in (("retention_ms", retention_ms), ("retention_bytes", retention_bytes),
                        ("max_message_size", max_message_size)):
        if value is not None and value < 1:
            raise InvalidArgument(f"{what} must be >= 1 (leave it out to use the broker's "
                                  f"setting), not {value}")
