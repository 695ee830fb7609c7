"""Prometheus metrics of a running server, served over HTTP on ``metrics_port`` (off by
default; ``metrics_host`` is loopback by default). docs/operations.md lists every metric.

Nothing is measured per request for this: a custom collector reads, at scrape time, state
the broker and the server keep anyway (``broker.stats()``, the inventory, the server's
counters). prometheus-client's HTTP server runs in its own thread, so a scrape never blocks
the event loop; the server's own state, which only the event loop may touch, is copied
there by a short callback the scrape waits for (at most ``LOOP_TIMEOUT`` seconds).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from fmq.engine.broker import Broker
from fmq.errors import ConfigError, FMQError
from fmq.log.flush_stats import Histogram
from fmq.message import DLQ_PREFIX

logger = logging.getLogger("fmq.server")

#: Longest a scrape waits for the event loop to copy the server's counters.
LOOP_TIMEOUT = 2.0


def _histogram(name: str, doc: str, h: Histogram) -> HistogramMetricFamily:
    cumulative, running = [], 0
    for bound, n in zip((*h.bounds, float("inf")), h.counts, strict=True):
        running += n
        cumulative.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
    return HistogramMetricFamily(name, doc, buckets=cumulative, sum_value=h.total)


class BrokerCollector:
    """Reads the broker and, through ``server_state``, the server, on every scrape."""

    def __init__(self, broker: Broker, server_state: Callable[[], dict[str, Any] | None]) -> None:
        self.broker = broker
        self.server_state = server_state

    def collect(self) -> Iterator[Metric]:
        server = self.server_state()
        # A group's lag covers the topics its live members name, committed in or not.
        subscribed = ({name: g["topics"] for name, g in server["groups"].items()}
                      if server is not None else {})
        try:
            yield from self._broker_metrics(subscribed)
        except FMQError as exc:  # the broker is closing: the scrape gets what there is
            logger.debug("metrics: broker not readable (%s)", exc)
        if server is not None:
            yield from self._server_metrics(server)

    def _broker_metrics(self, subscribed: dict[str, list[str]]) -> Iterator[Metric]:
        b = self.broker
        s = b.stats()
        inv = b.inventory
        traffic = inv.traffic()
        for key, name, doc in (
                ("messages_in", "fmq_messages_in", "Messages stored, by topic."),
                ("bytes_in", "fmq_bytes_in", "Body bytes stored, by topic."),
                ("messages_out", "fmq_messages_out", "Messages read by consumers, by topic."),
                ("bytes_out", "fmq_bytes_out", "Body bytes read by consumers, by topic.")):
            c = CounterMetricFamily(name, doc + " Since the server started.", labels=["topic"])
            for topic, counts in sorted(traffic.items()):
                c.add_metric([topic], counts[key])
            yield c
        latency, size = b.flush_histograms()
        yield _histogram("fmq_fsync_seconds", "Group-commit flush latency (write and "
                         "fdatasync), seconds.", latency)
        yield _histogram("fmq_group_commit_bytes", "Bytes made durable by one group-commit "
                         "flush.", size)
        yield CounterMetricFamily("fmq_flushes", "Group-commit flushes.", value=s["flushes"])
        disk = inv.disk_usage()
        yield GaugeMetricFamily("fmq_log_bytes", "Log bytes between the first and the next "
                                "offset.", value=s["log_end"] - s["log_start"])
        yield GaugeMetricFamily("fmq_log_disk_bytes", "Disk space the segment files take.",
                                value=disk["log_bytes"])
        yield GaugeMetricFamily("fmq_index_disk_bytes", "Disk space the index takes.",
                                value=disk["index_bytes"])
        yield GaugeMetricFamily("fmq_log_segments", "Segment files.", value=s["segments"])
        yield GaugeMetricFamily("fmq_index_lag_bytes", "Durable log bytes not yet indexed "
                                "(not yet consumable).", value=s["index_lag"])
        yield GaugeMetricFamily("fmq_index_lag_seconds", "How long the oldest durable record "
                                "not yet indexed has waited.", value=s["index_lag_ms"] / 1000)
        yield GaugeMetricFamily("fmq_open_transactions", "Open (prepared) transactions.",
                                value=s["open_transactions"])
        yield GaugeMetricFamily("fmq_oldest_transaction_age_seconds", "Age of the oldest open "
                                "transaction.", value=s["oldest_transaction_age_ms"] / 1000)
        yield CounterMetricFamily("fmq_checkbacks_sent", "Feedback check-backs offered to "
                                  "producers.", value=s["feedback_checks_sent"])
        yield CounterMetricFamily("fmq_bad_records_read", "Damaged records consumers met "
                                  "(each logged at ERROR once).", value=s["bad_records_read"])
        yield CounterMetricFamily("fmq_tx_timeouts", "Transactions tx_timeout_ms rolled back.",
                                  value=s["tx_timeouts"])
        yield CounterMetricFamily("fmq_tx_closed_scope_rollbacks", "Transactions of closed "
                                  "scopes the check-back rolled back.",
                                  value=s["tx_closed_scope_rollbacks"])
        yield CounterMetricFamily("fmq_tx_decided_scope_commits", "Transactions of decided "
                                  "scopes the broker committed (rolled forward).",
                                  value=s["tx_decided_scope_commits"])
        yield GaugeMetricFamily("fmq_timers_pinning_retention_bytes", "Bytes of the pending "
                                "timers while they alone keep the log over retention_bytes "
                                "(else 0).", value=s["timers_pinning_retention_bytes"])
        dup = CounterMetricFamily("fmq_duplicates_dropped", "Idempotent resends answered "
                                  "with their original's result instead of being stored, by "
                                  "topic. Since the server started.", labels=["topic"])
        for topic, n in sorted(b.duplicates_by_topic().items()):
            dup.add_metric([topic], n)
        yield dup
        yield GaugeMetricFamily("fmq_dedup_producers", "Producer ids the dedup window "
                                "remembers.", value=s["dedup_producers"])
        yield GaugeMetricFamily("fmq_dedup_message_ids", "Message ids the dedup window "
                                "remembers.", value=s["dedup_message_ids"])
        yield GaugeMetricFamily("fmq_log_failed", "1 when the log stopped after an I/O error.",
                                value=1 if s["log_failed"] else 0)
        yield from self._group_metrics(subscribed)
        yield from self._delivery_metrics()

    def _delivery_metrics(self) -> Iterator[Metric]:
        d = self.broker.deliveries.stats()
        yield GaugeMetricFamily("fmq_timers_pending", "Scheduled messages and retries waiting "
                                "for their time.", value=d["timers_pending"])
        yield CounterMetricFamily("fmq_timers_delivered", "Timers delivered since the server "
                                  "started.", value=d["timers_delivered"])
        yield CounterMetricFamily("fmq_timer_relocations", "Pending timers retention moved to "
                                  "the log head since the server started.",
                                  value=d["timer_relocations"])
        retries = GaugeMetricFamily("fmq_group_retries_pending", "Failed messages waiting for "
                                    "their redelivery to a group.", labels=["group"])
        dead = GaugeMetricFamily("fmq_group_dead_letters", "Dead letters of a group not yet "
                                 "redriven.", labels=["group"])
        dead_age = GaugeMetricFamily("fmq_group_dead_letter_age_seconds", "How long the "
                                     "oldest dead letter of a group not yet redriven has "
                                     "been stored (0 when none).", labels=["group"])
        for group, counts in d["groups"].items():
            retries.add_metric([group], counts["retries_pending"])
            dead.add_metric([group], counts["dead_letters"])
            dead_age.add_metric([group], self._oldest_dead_letter_age_s(group))
        yield from (retries, dead, dead_age)

    def _oldest_dead_letter_age_s(self, group: str) -> float:
        oldest = self.broker.deliveries.oldest_dead_letter_ms(group)
        return 0.0 if oldest is None else max(0.0, time.time() - oldest / 1000)

    def _group_metrics(self, subscribed: dict[str, list[str]]) -> Iterator[Metric]:
        labels = ["group", "topic", "queue"]
        committed = GaugeMetricFamily("fmq_consumer_committed_offset", "A group's committed "
                                      "offset in a queue.", labels=labels)
        lag = GaugeMetricFamily("fmq_consumer_lag_messages", "Messages of a queue a group has "
                                "not consumed.", labels=labels)
        lag_s = GaugeMetricFamily("fmq_consumer_lag_seconds", "How long the first message a "
                                  "group has not consumed has been stored.", labels=labels)
        # Every queue of every topic a group subscribes to (fmq.engine.group_lag); a deleted
        # topic's series end with it.
        for r in self.broker.inventory.groups(subscribed=subscribed):
            key = [r["group"], r["topic"], str(r["queue_id"])]
            if r["committed"] is not None:  # never committed there: lag, but no offset
                committed.add_metric(key, r["committed"])
            if r["topic"].startswith(DLQ_PREFIX):
                # Dead letters wait for an operator, not for the group's consumers: counted
                # as lag they would fire the lag alert for every one (fmq_group_dead_letters).
                continue
            lag.add_metric(key, r["lag"])
            lag_s.add_metric(key, r["lag_ms"] / 1000)
        yield from (committed, lag, lag_s)

    def _server_metrics(self, server: dict[str, Any]) -> Iterator[Metric]:
        info = GaugeMetricFamily("fmq_build_info", "Always 1: the release and the hot path "
                                 "running (compiled or pure, docs/performance.md).",
                                 labels=["version", "path"])
        info.add_metric([server["version"], server["implementation"]], 1)
        yield info
        yield GaugeMetricFamily("fmq_connections", "Established client connections.",
                                value=server["connections"])
        yield GaugeMetricFamily("fmq_pending_connections", "Connections that have not sent a "
                                "request yet.", value=server["pending_connections"])
        requests = CounterMetricFamily("fmq_requests", "Requests decoded, by operation.",
                                       labels=["op"])
        for op, n in sorted(server["requests_by_op"].items()):
            requests.add_metric([op], n)
        yield requests
        errors = CounterMetricFamily("fmq_request_errors", "Error answers, by operation and "
                                     "error code (docs/protocol.md).", labels=["op", "code"])
        for e in server["errors_by_code"]:
            errors.add_metric([e["op"], str(e["code"])], e["count"])
        yield errors
        answers = server["requests_by_op"].get("ANSWER_UNCERTAIN", 0) - sum(
            e["count"] for e in server["errors_by_code"] if e["op"] == "ANSWER_UNCERTAIN")
        yield CounterMetricFamily("fmq_checkbacks_answered", "Feedback check-backs producers "
                                  "answered (ANSWER_UNCERTAIN requests not refused).",
                                  value=answers)
        yield CounterMetricFamily("fmq_protocol_errors", "Malformed frames or requests.",
                                  value=server["protocol_errors"])
        yield CounterMetricFamily("fmq_busy_refusals", "Requests refused with ServerBusy.",
                                  value=server["busy_refusals"])
        yield CounterMetricFamily("fmq_access_denied", "Requests an access rule refused.",
                                  value=server["access_denied"])
        yield CounterMetricFamily("fmq_auth_failures", "Failed log-ins.",
                                  value=server["auth_failures"])
        members = GaugeMetricFamily("fmq_group_members", "Live members of a consumer group.",
                                    labels=["group"])
        for name, g in sorted(server["groups"].items()):
            members.add_metric([name], len(g["members"]))
        yield members
        if server.get("replication"):
            yield from _replication_metrics(server["replication"])
        if server.get("kafka"):
            yield from _kafka_metrics(server["kafka"])


def _kafka_metrics(k: dict[str, Any]) -> Iterator[Metric]:
    """The Kafka door's (docs/kafka.md): its connections and requests by API."""
    yield GaugeMetricFamily("fmq_kafka_connections", "Open Kafka connections.",
                            value=k["connections"])
    requests = CounterMetricFamily("fmq_kafka_requests", "Kafka requests, by API.",
                                   labels=["api"])
    for api, n in sorted(k["requests_by_api"].items()):
        requests.add_metric([api], n)
    yield requests


def _replication_metrics(r: dict[str, Any]) -> Iterator[Metric]:
    """A primary's followers, or a follower's own lag (docs/replication.md)."""
    if r["role"] == "follower":
        yield GaugeMetricFamily("fmq_replica_lag_bytes", "This follower's durable copy is "
                                "this many bytes behind its primary.",
                                value=r.get("lag_bytes", 0))
        yield CounterMetricFamily("fmq_replica_rejected_chunks", "Shipped chunks that failed "
                                  "their checks (never written).",
                                  value=r.get("rejected_chunks", 0))
        return
    lag = GaugeMetricFamily("fmq_follower_lag_bytes", "How far a follower's durable offset "
                            "is behind this primary's.", labels=["follower"])
    in_sync = GaugeMetricFamily("fmq_follower_in_sync", "1 while a follower is in the "
                                "in-sync set.", labels=["follower"])
    for f in r["followers"]:
        lag.add_metric([f["name"]], f["lag_bytes"])
        in_sync.add_metric([f["name"]], 1 if f["in_sync"] else 0)
    yield from (lag, in_sync)
    yield CounterMetricFamily("fmq_not_enough_replicas", "Writes refused with "
                              "NotEnoughReplicas (sync mode).",
                              value=r["not_enough_replicas"])


class MetricsEndpoint:
    """The HTTP endpoint: started with the server, stopped before the broker closes."""

    def __init__(self, broker: Broker, stats: Callable[[], dict[str, Any]],
                 loop: asyncio.AbstractEventLoop, host: str, port: int) -> None:
        self._stats = stats
        self._loop = loop
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker, self._server_state))
        try:
            self._http, self._thread = start_http_server(port, host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); "
                              f"choose another --metrics-port or stop the process using it"
                              ) from None
        self.port = self._http.server_address[1]
        logger.info("metrics on http://%s:%d/metrics", host, self.port)

    def _server_state(self) -> dict[str, Any] | None:
        """The server's counters, copied on the event loop (None when it does not answer)."""
        async def copy() -> dict[str, Any]:
            return self._stats()

        try:
            return asyncio.run_coroutine_threadsafe(copy(), self._loop).result(LOOP_TIMEOUT)
        except (RuntimeError, TimeoutError, asyncio.CancelledError):
            return None  # the loop is stopping: the scrape gets the broker's figures

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(5)
