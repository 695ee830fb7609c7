"""Topic administration (``Broker.topics``; ``fmq topic create|describe|alter|delete|list``):
each change is one TOPIC record carrying the topic's whole configuration after it, placed
under the log lock (so sends placed after it see it), answered once it is durable and
indexed. Recovery, both index rebuilds and followers derive the same table from the log.

A topic deleted keeps its name's queue offsets: the delete records each queue's next
offset as its floor, nothing below a floor is readable again, and a topic created again
continues from there (no offset is ever handed out twice, and a consumer group's old
committed offset simply skips to the floor).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from fmq.config import BrokerConfig
from fmq.engine.group_lag import group_lag_rows
from fmq.engine.queues import Queues
from fmq.engine.topic_retention import enforce_topic_retention
from fmq.errors import IndexUnavailable, InvalidArgument, TopicExists, TopicHasLag, UnknownTopic
from fmq.index.dispatcher import Dispatcher
from fmq.index.entries import TOPIC_CONFIG_PROPERTY
from fmq.index.store import IndexStore
from fmq.log.log import Log
from fmq.log.placement import now_ms
from fmq.log.record import Record, RecordType, encoded_length
from fmq.message import is_internal_topic
from fmq.topic_config import CREATED, DELETED, TopicConfig, check_topic_settings

logger = logging.getLogger("fmq.broker")

#: How long a change waits for the index to take its durable record before it reports it.
INDEX_WAIT_S = 30.0
#: In :meth:`Topics.alter`: set the setting back to the broker's (``--retention default``).
DEFAULT = 0


def load_topics(index: IndexStore) -> list[TopicConfig]:
    """The topic table of the index (every topic with a TOPIC record)."""
    return [TopicConfig.from_json(text) for text in index.topic_configs().values() if text]


class Topics:
    """Create, alter, delete, describe and list topics; their queue counts; their own
    retention."""

    def __init__(self, config: BrokerConfig, log_: Log, index: IndexStore,
                 dispatcher: Dispatcher, queues: Queues,
                 check_open: Callable[[], None]) -> None:
        self._config = config
        self._log = log_
        self._index = index
        self._dispatcher = dispatcher
        self._queues = queues
        self._check_open = check_open

    def group_lag(self, name: str, subscribers: Iterable[str] = ()
                  ) -> list[tuple[str, int, int]]:
        """(group, queue id, unread messages) in every queue of ``name`` of every group
        subscribed to it: one that committed in any of its queues, or one of
        ``subscribers`` (live members name it)."""
        subscribed = {g: [name] for g in subscribers}
        return [(r["group"], r["queue_id"], r["lag"])
                for r in group_lag_rows(self._index, now_ms(), self._queues.queue_count,
                                        subscribed=subscribed) if r["topic"] == name]

    def enforce_retention(self, now: float | None = None) -> int:
        """Raise the queue floors of the topics with a retention of their own
        (:mod:`fmq.engine.topic_retention`); returns the messages made unreadable."""
        with self._log.lock:
            table = [cfg.changed(queues=self._queues.queue_count(cfg.name))
                     for cfg in self._queues.topics.values()]
        return enforce_topic_retention(self._index, table, now)

    # ------------------------------------------------------------------ reading

    def _follow_index(self) -> None:
        """On a follower, take the topic table from the index: its TOPIC records arrive by
        log shipping and are indexed, never placed here (a primary's table is its own)."""
        if self._config.follow:
            table = load_topics(self._index)
            with self._log.lock:
                self._queues.topics.update({t.name: t for t in table})

    def queue_count(self, topic: str) -> int:
        """How many queues ``topic`` has: its own setting (``fmq topic``) or
        ``queues_per_topic``, or more when the stored data of the topic uses more (a lower
        setting applies only to new topics)."""
        return self._queues.queue_count(topic)

    def get(self, name: str) -> TopicConfig | None:
        """``name``'s settings: its own (created), the defaults (made by a first send), or
        None (never created, never sent to, or deleted)."""
        self._follow_index()
        with self._log.lock:
            own = self._queues.topics.get(name)
            known = own is not None or name in self._queues.topic_names()
            count = self._queues.queue_count(name)
        if own is not None:
            return None if own.deleted else own.changed(queues=count)
        return TopicConfig(name, count) if known else None

    def list(self) -> list[dict]:
        """Every topic that exists, by name: its settings, whether a send made it
        (``auto_created``). Held in memory: no index walk."""
        self._check_open()
        self._follow_index()
        with self._log.lock:
            names = sorted(self._queues.topic_names())
            table = dict(self._queues.topics)
            counts = {n: self._queues.queue_count(n) for n in names}
        out = []
        for name in names:
            own = table.get(name)
            if own is not None and own.deleted:
                continue
            cfg = (own or TopicConfig(name, counts[name])).changed(queues=counts[name])
            out.append({**cfg.to_wire_dict(), "auto_created": own is None})
        return out

    def describe(self, name: str) -> dict:
        """``name``'s settings, the ones in force (the broker's where it has none of its
        own), and each queue's readable range."""
        self._check_open()
        check_topic_settings(name, None, None, None, None)
        cfg = self.get(name)
        if cfg is None:
            raise UnknownTopic(name)
        queues = []
        for qid in range(cfg.queues):
            lo, hi = self._index.queue_range(name, qid)
            queues.append({"queue_id": qid, "min_offset": lo, "next_offset": hi})
        with self._log.lock:
            auto = name not in self._queues.topics
        return {**cfg.to_wire_dict(), "auto_created": auto, "effective": self._effective(cfg),
                "queue_ranges": queues}

    def _effective(self, cfg: TopicConfig) -> dict:
        broker = self._config
        return {"retention_ms": cfg.retention_ms or broker.retention_ms or None,
                "retention_bytes": cfg.retention_bytes,
                "broker_retention_bytes": broker.retention_bytes or None,
                "max_message_size": cfg.max_message_size or broker.max_message_size}

    # ------------------------------------------------------------------ changing

    def create(self, name: str, queues: int | None = None, retention_ms: int | None = None,
               retention_bytes: int | None = None,
               max_message_size: int | None = None) -> TopicConfig:
        """A new topic (or one deleted, again: its offsets continue). TopicExists when it
        exists, made by ``create`` or by a first send."""
        self._check_open()
        self._check_settings(name, queues, retention_ms, retention_bytes, max_message_size)
        with self._log.lock:
            own = self._queues.topics.get(name)
            if (own is not None and not own.deleted) or (
                    own is None and name in self._queues.topic_names()):
                raise TopicExists(name)
            # A topic created again keeps the queues its old data used (offsets continue),
            # and starts past whatever reached it while deleted (a transaction prepared
            # before the delete and committed after it): only new messages are readable.
            count = max(queues or self._config.queues_per_topic,
                        self._queues.queue_count(name) if own is not None else 0)
            floors = self._floors_now(own) if own is not None else {}
            cfg = TopicConfig(name, count, retention_ms, retention_bytes, max_message_size,
                              CREATED, floors)
            end = self._place(cfg)
        self._settle(cfg, end)
        logger.info("topic %s created: %s", name, cfg.to_json())
        return cfg

    def alter(self, name: str, queues: int | None = None, retention_ms: int | None = None,
              retention_bytes: int | None = None,
              max_message_size: int | None = None) -> TopicConfig:
        """Change the given settings (None: unchanged; :data:`DEFAULT`: back to the
        broker's). Queues only grow: a topic's messages keep their queues."""
        self._check_open()
        opt = [None if v == DEFAULT else v for v in (retention_ms, retention_bytes,
                                                       max_message_size)]
        self._check_settings(name, queues, *opt)
        with self._log.lock:
            cfg = self._existing_locked(name)
            if queues is not None and queues < cfg.queues:
                raise InvalidArgument(
                    f"topic {name!r} has {cfg.queues} queues and queues only grow (its "
                    f"messages keep their queues); give --queues {cfg.queues} or more")
            changes: dict = {}
            if queues is not None:
                changes["queues"] = queues
            for field, given, value in zip(
                    ("retention_ms", "retention_bytes", "max_message_size"),
                    (retention_ms, retention_bytes, max_message_size), opt, strict=True):
                if given is not None:
                    changes[field] = value
            cfg = cfg.changed(**changes)
            end = self._place(cfg)
        self._settle(cfg, end)
        logger.info("topic %s altered: %s", name, cfg.to_json())
        return cfg

    def delete(self, name: str, force: bool = False,
               subscribers: Iterable[str] = ()) -> TopicConfig:
        """Make every message of ``name`` unreadable and the topic unknown. Refused
        (TopicHasLag) while a consumer group subscribed to it (see :meth:`group_lag`) has
        not read all of it, unless ``force``."""
        self._check_open()
        check_topic_settings(name, None, None, None, None)
        if self.get(name) is None:
            raise UnknownTopic(name)
        lagging = [row for row in self.group_lag(name, subscribers) if row[2] > 0]
        if lagging and not force:
            raise TopicHasLag(name, ", ".join(f"group {g} queue {q}: {n} unread"
                                              for g, q, n in sorted(lagging)))
        with self._log.lock:
            cfg = self._existing_locked(name)
            cfg = cfg.changed(state=DELETED, floors=self._floors_now(cfg))
            end = self._place(cfg)
        self._settle(cfg, end)
        logger.warning("topic %s deleted%s: queue floors %s", name,
                       " with --force" if lagging else "", cfg.floors)
        return cfg

    def _floors_now(self, cfg: TopicConfig) -> dict[int, int]:
        """``cfg``'s floors raised to each queue's next offset (the log lock held)."""
        floors = dict(cfg.floors)
        for qid in range(self._queues.queue_count(cfg.name)):
            nxt = self._queues.next_offset(cfg.name, qid)
            if nxt > floors.get(qid, 0):  # a queue never written has nothing to hide
                floors[qid] = nxt
        return floors

    def _existing_locked(self, name: str) -> TopicConfig:
        own = self._queues.topics.get(name)
        if own is not None and own.deleted:
            raise UnknownTopic(name)
        if own is None:
            if name not in self._queues.topic_names():
                raise UnknownTopic(name)
            own = TopicConfig(name, self._queues.queue_count(name))
        return own.changed(queues=max(own.queues, self._queues.queue_count(name)))

    def _check_settings(self, name: str, queues: int | None, retention_ms: int | None,
                        retention_bytes: int | None, max_message_size: int | None) -> None:
        check_topic_settings(name, queues, retention_ms, retention_bytes, max_message_size)
        if is_internal_topic(name):
            raise InvalidArgument(f"topic {name!r} is one of FMQ's own (names starting with "
                                  f"'%'); pick another name")
        broker = self._config
        # One log holds every topic: a topic cannot keep data longer or larger than the
        # broker keeps its segments, so such a setting is refused rather than ignored.
        if retention_ms is not None and broker.retention_ms and retention_ms > broker.retention_ms:
            raise InvalidArgument(
                f"retention_ms {retention_ms} is longer than the broker's retention_ms "
                f"{broker.retention_ms}: segments go after that whatever the topic says; "
                f"give at most {broker.retention_ms} or raise the broker's")
        if (retention_bytes is not None and broker.retention_bytes
                and retention_bytes > broker.retention_bytes):
            raise InvalidArgument(
                f"retention_bytes {retention_bytes} (per queue) is more than the broker's "
                f"retention_bytes {broker.retention_bytes} for the whole log; give at most "
                f"{broker.retention_bytes} or raise the broker's")
        if max_message_size is not None and max_message_size > broker.max_message_size:
            raise InvalidArgument(
                f"max_message_size {max_message_size} is over the broker's "
                f"max_message_size {broker.max_message_size}; give at most that or raise "
                f"the broker's")

    def _place(self, cfg: TopicConfig) -> int:
        """Append ``cfg``'s TOPIC record and make it the topic's (the log lock held);
        returns the log offset to wait for."""
        if self._config.follow:
            raise InvalidArgument("this server is a follower: change topics on the primary")
        record = Record(RecordType.TOPIC, store_time=now_ms(), topic=cfg.name,
                        properties={TOPIC_CONFIG_PROPERTY: cfg.to_json()})
        self._log.reserve_locked([encoded_length(record)])
        self._log.append_locked(record)
        self._queues.topics[cfg.name] = cfg
        return self._log.next_offset

    def _settle(self, cfg: TopicConfig, end: int) -> None:
        """Wait until the change is durable and indexed (a read after the answer sees it)."""
        self._log.wait_durable(end, sync=True)
        if not self._dispatcher.wait_applied(end, INDEX_WAIT_S):
            raise IndexUnavailable(
                f"the change of topic {cfg.name} is stored but the index has not taken it yet "
                f"({self._dispatcher.error or 'still applying'}); reads see it once it does "
                f"(check with: fmq topic describe {cfg.name})")
