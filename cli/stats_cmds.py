"""``fmq stats`` and ``fmq topics``: what a running server holds, for an operator."""

from __future__ import annotations

import json

import click
from fmq.cli import output as out
from fmq.cli.client_options import client_kwargs
from fmq.cli.common import emit, fmq_errors, json_option
from fmq.cli.net_cmds import server_option


def call_json(server: str, op_name: str, fields: dict | None = None,
              node: str = "any") -> dict:
    """The JSON answer of an operator request (STATS, TOPICS, GROUPS, RESET_OFFSETS),
    from the first of ``server``'s addresses that answers (``node`` "any") or from the
    primary among them ("primary")."""
    from fmq.client import Client
    from fmq.protocol import Op

    with Client(server, retries=1, node=node, **client_kwargs()) as client:
        return json.loads(client.call(Op[op_name], fields or {})["json"])


TOPIC_COLUMNS: list[out.Column] = [
    ("TOPIC", lambda t: t["topic"]),
    ("QUEUES", lambda t: t["queues"]),
    ("MESSAGES", lambda t: t["messages"]),
    ("BYTES", lambda t: out.size(t["bytes"])),
    ("FIRST STORED", lambda t: out.date_ms(t["first_store_time"])),
    ("LAST STORED", lambda t: out.date_ms(t["last_store_time"])),
]

OFFSET_COLUMNS: list[out.Column] = [
    ("GROUP", lambda r: r["group"]),
    ("TOPIC", lambda r: r["topic"]),
    ("QUEUE", lambda r: r["queue_id"]),
    ("COMMITTED", lambda r: r["committed"]),
    ("NEXT", lambda r: r["next_offset"]),
    ("LAG", lambda r: r["lag"]),
    ("LAG TIME", lambda r: out.duration_ms(r["lag_ms"]) if r["lag"] else out.NONE),
    ("MEMBER", lambda r: r.get("owner")),
]


def render_topics(data: dict) -> str:
    disk = data["disk"]
    return "\n".join([
        out.table(data["topics"], TOPIC_COLUMNS, "no topics"),
        "",
        f"disk: log {out.size(disk['log_bytes'])} in "
        f"{out.plural(disk['segment_files'], 'segment file')}, "
        f"index {out.size(disk['index_bytes'])}",
    ])


def render_stats(s: dict, topics: dict, groups: dict) -> str:
    cp = s.get("last_checkpoint")
    srv = s.get("server", {})
    disk = topics["disk"]
    oldest = (out.duration_ms(s["oldest_transaction_age_ms"]) if s["open_transactions"]
              else out.NONE)
    broker = out.fields([
        ("log", f"offsets {out.count(s['log_start'])} .. {out.count(s['log_end'])}, "
                f"{out.plural(s['segments'], 'segment')}, "
                f"{out.plural(s['flushes'], 'flush', 'flushes')}"),
        ("disk", f"log {out.size(disk['log_bytes'])}, index {out.size(disk['index_bytes'])}"),
        ("index lag", f"{out.size(s['index_lag'])} (applied {out.count(s['applied_offset'])}"
                      f" of {out.count(s['flushed_offset'])} flushed)"),
        ("checkpoint", out.NONE if not cp else
         f"recovery from {out.count(cp['recovery_offset'])}, written "
         f"{out.date_s(cp['written_at'])}"),
        ("transactions", f"{out.count(s['open_transactions'])} open, oldest {oldest}, "
                         f"{out.plural(s['feedback_checks_sent'], 'check-back')} sent"),
        ("idempotence", None if "duplicates_dropped" not in s else
         f"{out.plural(s['duplicates_dropped'], 'duplicate')} dropped; remembers "
         f"{out.plural(s['dedup_producers'], 'producer')}, "
         f"{out.plural(s['dedup_message_ids'], 'message id')}"),
    ])
    errors = out.fields([
        ("log failure", s["log_failed"]),
        ("index failure", s["dispatcher_error"] or s["index_error"]),
        ("index retries", s["index_retries"]),
        ("bad records read", f"{out.count(s['bad_records_read'])} "
                             f"({out.plural(s['bad_record_reads'], 'read')} refused)"),
        ("tx timeouts", s["tx_timeouts"]),
        ("protocol errors", srv.get("protocol_errors")),
        ("busy refusals", srv.get("busy_refusals")),
        ("timed out", srv.get("timed_out")),
    ])
    server = out.fields([
        ("version", None if "version" not in srv else
         f"{srv['version']} ({srv.get('implementation', 'pure')})"),
        ("uptime", out.duration_ms(srv["uptime_s"] * 1000) if "uptime_s" in srv else None),
        ("connections", f"{out.count(srv.get('connections', 0))} "
                        f"({out.count(srv.get('pending_connections', 0))} pending)"),
        ("requests", f"{out.count(srv.get('requests', 0))} "
                     f"({out.count(srv.get('in_flight', 0))} in flight)"),
        ("request bytes", f"{out.size(srv.get('request_bytes'))} (peak "
                          f"{out.size(srv.get('request_bytes_peak'))})"),
        # A pull reserves room for its largest possible answer before it reads, so the
        # peak is mostly reservations (often the per-connection limit), not bytes sent.
        ("reply bytes", f"{out.size(srv.get('reply_bytes'))} held now, at most "
                        f"{out.size(srv.get('reply_bytes_peak'))} reserved at once"),
    ])
    rows = [dict(r) for g in groups["groups"] for r in g["offsets"]]
    members = out.table(
        [{"group": g["group"], "members": len(g["members"]), "generation": g["generation"]}
         for g in groups["groups"]],
        [("GROUP", lambda g: g["group"]), ("MEMBERS", lambda g: g["members"]),
         ("GENERATION", lambda g: g["generation"])], "no consumer groups")
    delivery = s.get("delivery", {})
    retries = out.table(
        [{"group": g, **c} for g, c in delivery.get("groups", {}).items()],
        [("GROUP", lambda g: g["group"]), ("RETRIES PENDING", lambda g: g["retries_pending"]),
         ("DEAD LETTERS", lambda g: g["dead_letters"])], "no retries or dead letters")
    timers = out.fields([
        ("timers pending", delivery.get("timers_pending")),
        ("timers delivered", delivery.get("timers_delivered")),
        ("timer relocations", delivery.get("timer_relocations")),
        ("timers over retention", out.size(s.get("timers_pinning_retention_bytes"))),
    ])
    failures = out.table(srv.get("errors_by_code", []),
                         [("OP", lambda e: e["op"]), ("CODE", lambda e: e["code"]),
                          ("COUNT", lambda e: e["count"])], "no error answers")
    return "\n\n".join([
        out.section("BROKER", broker),
        out.section("TOPICS", out.table(topics["topics"], TOPIC_COLUMNS, "no topics")),
        out.section("GROUPS", members + "\n\n" + out.table(rows, OFFSET_COLUMNS,
                                                            "no committed offsets")),
        out.section("SCHEDULED AND RETRIES", timers + "\n\n" + retries),
        out.section("ERRORS", errors + "\n\n" + failures),
        out.section("SERVER", server),
    ])


@click.command("stats")
@server_option
@json_option
@fmq_errors
def stats(server: str, as_json: bool) -> None:
    """Broker and server statistics of a running server: topics, consumer groups and lag,
    disk usage, transactions, error counters."""
    data = call_json(server, "STATS", node="primary")
    topics = call_json(server, "TOPICS", node="primary")
    groups = call_json(server, "GROUPS", {"group": None}, node="primary")
    if as_json:
        emit({**data, "topics": topics["topics"], "disk": topics["disk"],
              "consumer_groups": groups["groups"]}, True)
    else:
        click.echo(render_stats(data, topics, groups))


@click.command("topics")
@server_option
@json_option
@fmq_errors
def topics(server: str, as_json: bool) -> None:
    """Every topic of a running server: queues, messages, bytes, first and last store time."""
    data = call_json(server, "TOPICS", node="primary")
    if as_json:
        for t in data["topics"]:
            emit(t, True)
    else:
        click.echo(render_topics(data))


def register(cli: click.Group) -> None:
    for cmd in (stats, topics):
        cli.add_command(cmd)
