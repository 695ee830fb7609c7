"""``fmq server | produce | consume``: the network side of the command line (``fmq stats``,
``topics`` and ``groups`` are in their own modules)."""

from __future__ import annotations

import base64
import logging
import sys
import time
from collections.abc import Iterator

import click
from fmq.cli import output as out
from fmq.cli.client_options import client_kwargs, security_options
from fmq.cli.common import (
    TIME_HELP,
    data_dir_to_create,
    emit,
    fmq_errors,
    json_option,
    parse_time_ms,
)

DEFAULT_SERVER = "127.0.0.1:9876"
#: A command gives up after this many retries (a person waits at the prompt), where a
#: producer in an application retries until its delivery_timeout.
CLI_RETRIES = 3

#: ``--server`` alone, for a command whose connections do not take the TLS options yet.
server_address_option = _server_address = click.option(
    "--server", "server", default=DEFAULT_SERVER, show_default=True, envvar="FMQ_SERVER",
    help="HOST:PORT of the FMQ server (comma-separated for several); env FMQ_SERVER.")


def server_option(fn):
    """``--server`` and the TLS options of every command that connects."""
    return security_options(_server_address(fn))


@click.command("server")
@data_dir_to_create("./fmq-data", "Data directory (created if missing); or give DATA_DIR.")
@click.option("--host", default=None, help="Address to listen on [default: 127.0.0.1].")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="Port to listen on, 0 = any free port [default: 9876].")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              default=None, help="TOML (*.toml) or JSON file: BrokerConfig fields, plus a "
                                 "server table with ServerConfig fields (limits, threads, "
                                 "time-outs); `fmq config show` prints the result.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port (/metrics) [default: off].")
@click.option("--metrics-host", default=None,
              help="Address of the metrics endpoint [default: 127.0.0.1].")
@click.option("--kafka-port", type=click.IntRange(0, 65535), default=None,
              help="Also serve Kafka's wire protocol on this port (docs/kafka.md) "
                     "[default: off].")
@click.option("--console-port", type=click.IntRange(0, 65535), default=None,
              help="Serve the console in a browser on this port (docs/console.md) "
                   "[default: off].")
@click.option("--follow", default=None, metavar="HOST:PORT",
              help="Run as a follower of the primary at HOST:PORT: copy its log, take no "
                   "writes (docs/replication.md) [default: the config file's follow].")
@click.option("--ack-mode", type=click.Choice(["async", "sync"]), default=None,
              help="sync: acknowledge writes only once --min-insync followers fsynced them "
                   "[default: the config file's ack_mode, else async].")
@click.option("--min-insync", type=click.IntRange(min=1), default=None,
              help="Followers that must hold a write in sync mode [default: 1].")
@click.option("--coordinator", default=None, metavar="etcd://HOST:PORT",
              help="Elect the primary through this etcd (no --follow): fail-over "
                   "(docs/replication.md) [default: the config file's server.coordinator].")
@click.option("--group", default=None,
              help="The broker group to elect in [default: the config file's, else default].")
@click.option("--node", default=None,
              help="This node's name in its group [default: its address, HOST:PORT].")
@click.option("--cluster-name", default=None,
              help="The cluster whose users, access rules and topic routes (kept in the "
                   "--coordinator's etcd) this node takes [default: the config file's "
                   "server.cluster, else fmq].")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Serve TLS with this PEM certificate chain (docs/security.md).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None,
              help="PEM key of --tls-cert (if not in the same file).")
@click.option("--tls-client-ca", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Require client certificates signed by this CA (mutual TLS).")
@click.option("--insecure", is_flag=True,
              help="Listen beyond loopback even though the data directory has no users "
                   "(anyone who can reach the port may do anything).")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              help="Log lines below this level are not written (the listening address "
                   "always is).")
@fmq_errors
def server(data_dir: str, host: str | None, port: int | None, config_file: str | None,
           metrics_port: int | None, metrics_host: str | None, kafka_port: int | None,
           console_port: int | None,
           follow: str | None, ack_mode: str | None, min_insync: int | None, coordinator: str | None,
           group: str | None, node: str | None, cluster_name: str | None,
           tls_cert: str | None,
           tls_key: str | None, tls_client_ca: str | None, insecure: bool,
           log_level: str) -> None:
    """Run the FMQ server until SIGINT/SIGTERM (then it finishes in-flight requests,
    checkpoints and exits 0)."""
    from fmq.server import load_config, run_server

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    broker_cfg, server_cfg = load_config(config_file)
    changes = {k: v for k, v in (("host", host), ("port", port), ("metrics_port", metrics_port),
                                 ("metrics_host", metrics_host), ("kafka_port", kafka_port),
                                 ("console_port", console_port),
                                 ("tls_cert_file", tls_cert),
                                 ("tls_key_file", tls_key),
                                 ("tls_client_ca_file", tls_client_ca),
                                 ("coordinator", coordinator), ("group", group),
                                 ("node", node), ("cluster", cluster_name))
               if v is not None}
    if changes:
        server_cfg = server_cfg.replace(**changes)
    replication = {k: v for k, v in (("follow", follow), ("ack_mode", ack_mode),
                                     ("min_insync", min_insync)) if v is not None}
    if replication:
        broker_cfg = broker_cfg.replace(**replication)
    # Below INFO the log does not say where the server listens; with --port 0 nobody could
    # find it, so say it on stderr anyway.
    quiet = logging.getLogger("fmq.server").getEffectiveLevel() > logging.INFO
    companions = []
    if server_cfg.console_port:
        from fmq.console.server import ConsoleServer  # aiohttp only when asked for
        companions.append(ConsoleServer)
    run_server(data_dir, broker_cfg, server_cfg, on_listening=_announce if quiet else None,
               insecure=insecure, companions=companions)


def _announce(host: str, port: int) -> None:
    click.echo(f"fmq server listening on {host}:{port}", err=True)


def _bodies(body: tuple[str, ...]) -> Iterator[str]:
    if body:
        yield from body
        return
    for line in sys.stdin:
        line = line.rstrip("\n")
        if line:
            yield line


@click.command("produce")
@server_option
@click.option("--topic", required=True, help="Topic to send to.")
@click.option("--body", multiple=True,
              help="Message body (repeatable). Without --body: one message per stdin line.")
@click.option("--key", default=None, help="Message key (routes to one queue).")
@click.option("--tags", default=None, help="Message tags.")
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True,
              help="Send the bodies this many times; {i} in a body becomes the sequence number.")
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True,
              help="Messages per request (one group commit each).")
@click.option("--tx", "tx", type=click.Choice(["commit", "rollback", "unknown"]), default=None,
              help="Send everything as one transaction and end it so ('unknown' leaves it "
                   "open for feedback or `fmq tx resolve`).")
@click.option("--group", "producer_group", default="fmq-cli", show_default=True,
              help="Producer group (transactions).")
@click.option("--delay", type=click.FloatRange(min=0), default=None,
              help="Seconds (on the server's clock) before the messages become consumable.")
@click.option("--deliver-at", default=None,
              help=f"When the messages become consumable: {TIME_HELP}.")
@json_option
@fmq_errors
def produce(server: str, topic: str, body: tuple[str, ...], key: str | None, tags: str | None,
            count: int, batch: int, tx: str | None, producer_group: str, delay: float | None,
            deliver_at: str | None, as_json: bool) -> None:
    """Send messages; prints where each one was stored. With --delay or --deliver-at they
    are stored now and become consumable at their time."""
    import fmq
    from fmq.client import Producer, TransactionProducer

    bodies = list(_bodies(body))
    msgs = [fmq.Message(topic, b.replace("{i}", str(i * len(bodies) + j)).encode(), key, tags)
            for i in range(count) for j, b in enumerate(bodies)]
    if not msgs:
        raise click.UsageError("nothing to send: give --body or lines on stdin")
    if tx is not None:
        decision = fmq.TxState(tx)
        try:
            with TransactionProducer(server, producer_group, lambda u: fmq.TxState.UNKNOWN,
                                     feedback=False, retries=CLI_RETRIES,
                                     **client_kwargs()) as producer:
                result = producer.send_in_transaction(msgs, lambda tx_id, arg: decision)
        except KeyboardInterrupt:
            click.echo(f"interrupted: the transaction of {out.plural(len(msgs), 'message')} "
                       f"may be left open; see `fmq tx list`", err=True)
            sys.exit(130)
        emit({"tx_id": result.tx_id, "state": result.state.value, "messages": len(msgs)},
             as_json, f"transaction {result.tx_id}: {result.state.value} "
                      f"({out.plural(len(msgs), 'message')})")
        return
    if delay is not None or deliver_at is not None:
        if tx is not None:
            raise click.UsageError("--tx cannot be scheduled: drop --delay / --deliver-at")
        at = None if deliver_at is None else parse_time_ms(deliver_at, "--deliver-at")
        _produce_scheduled(server, msgs, delay, at, as_json)
        return
    sent = 0
    try:
        with Producer(server, retries=CLI_RETRIES, **client_kwargs()) as producer:
            for start in range(0, len(msgs), batch):
                chunk = msgs[start:start + batch]
                results = (producer.send_batch(chunk) if len(chunk) > 1
                           else [producer.send_message(chunk[0])])
                sent += len(results)
                # In a cluster the offsets are the storing group's: name it.
                routed = not producer.route(topic).single
                for r in results:
                    group = r.group if routed else ""
                    emit(_sent_dict(topic, r, group), as_json, _sent_text(topic, r, group))
    except KeyboardInterrupt:
        # A request in flight when Ctrl-C came may still be stored: at-least-once.
        click.echo(f"interrupted: {sent} of {out.plural(len(msgs), 'message')} acknowledged (a batch in "
                   f"flight may be stored too)", err=True)
        sys.exit(130)


def _sent_dict(topic: str, r, group: str) -> dict:
    """Where a send stored its message; in a cluster (``group`` given), the broker group
    too: the queue id, queue offset and log offset are that group's."""
    d = {"topic": topic, "queue_id": r.queue_id, "queue_offset": r.queue_offset,
         "offset": r.offset}
    if group:
        d["group"] = group
    return d


def _sent_text(topic: str, r, group: str) -> str:
    where = f" in broker group {group}" if group else ""
    return f"sent to {topic}/{r.queue_id} offset {r.queue_offset}{where} (log {r.offset})"


def _produce_scheduled(server: str, msgs: list, delay: float | None, deliver_at: int | None,
                       as_json: bool) -> None:
    from fmq.client import Producer

    with Producer(server, retries=CLI_RETRIES) as producer:
        for m in msgs:
            r = producer.send_message(m, deliver_at=deliver_at, delay=delay)
            emit({"topic": m.topic, "offset": r.offset, "deliver_at": r.deliver_at}, as_json,
                 f"scheduled for {m.topic} at {out.date_ms(r.deliver_at)} (log {r.offset})")


def _message_dict(m) -> dict:
    d = {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
         "offset": m.offset, "key": m.key, "tags": m.tags, "properties": m.properties,
         "store_time": m.store_time}
    try:
        d["body"] = m.body.decode("utf-8")
    except UnicodeDecodeError:
        d["body_base64"] = base64.b64encode(m.body).decode()
    return d


@click.command("consume")
@server_option
@click.option("--topic", "topics", multiple=True, required=True, help="Topic (repeatable).")
@click.option("--group", default="fmq-cli", show_default=True, help="Consumer group.")
@click.option("--from-beginning", is_flag=True,
              help="Start at the start of each queue instead of the group's committed offset.")
@click.option("--max", "max_messages", type=click.IntRange(min=1), default=None,
              help="Stop after this many messages.")
@click.option("--idle-timeout", type=click.FloatRange(min=0), default=None,
              help="Stop when no message came for this many seconds (default: wait forever).")
@click.option("--no-commit", is_flag=True, help="Do not commit the group's offsets.")
@click.option("--tags", default=None,
              help="Only messages with one of these tags: 'a || b' (filtered by the server).")
@click.option("--follower-reads", is_flag=True,
              help="Pull from the first --server address that answers, which may be a "
                   "follower (the group and its commits stay on the primary).")
@click.option("--read-server", default=None, metavar="HOST:PORT",
              help="With --follower-reads: the node to pull from first.")
@json_option
@fmq_errors
def consume(server: str, topics: tuple[str, ...], group: str, from_beginning: bool,
            max_messages: int | None, idle_timeout: float | None, no_commit: bool,
            tags: str | None, follower_reads: bool, read_server: str | None,
            as_json: bool) -> None:
    """Print messages as a member of a consumer group; commits offsets as it goes."""
    from fmq.client import Consumer

    start = "earliest" if from_beginning else "committed"
    count = [0]
    try:
        if read_server is not None and not follower_reads:
            raise click.UsageError("--read-server needs --follower-reads")
        with Consumer(server, group, list(topics), start=start, tags=tags,
                      follower_reads=follower_reads, read_server=read_server,
                      **client_kwargs()) as consumer:
            _say_which_topics_are_missing(consumer, topics, idle_timeout)
            _consume(consumer, max_messages, idle_timeout, no_commit, as_json, count)
    except KeyboardInterrupt:  # Ctrl-C: the with block left the group; no traceback
        click.echo(f"interrupted: consumed {out.plural(count[0], 'message')}", err=True)
        sys.exit(130)
    if not as_json:
        click.echo(f"consumed {out.plural(count[0], 'message')}", err=True)


def _say_which_topics_are_missing(consumer, topics: tuple[str, ...],
                                  idle_timeout: float | None) -> None:
    """A topic's queues fill as its messages become consumable; waiting on one that has
    none yet must not look like a hang."""
    from fmq.errors import UnknownTopic

    def never_written(topic: str) -> bool:
        try:  # the topic's own queue count, which may differ from queues_per_topic
            ranges = consumer.describe_topic(topic)["queue_ranges"]
        except UnknownTopic:
            return True
        return all(r["next_offset"] == 0 for r in ranges)

    empty = [topic for topic in dict.fromkeys(topics) if never_written(topic)]
    if not empty:
        return
    scheduled = _scheduled_by_topic(consumer)
    until = (f"for up to {idle_timeout:g}s (--idle-timeout)" if idle_timeout is not None
             else "until one comes (Ctrl-C to stop; --idle-timeout SECONDS to give up)")
    for topic in empty:
        waiting = scheduled.get(topic, 0) if scheduled is not None else None
        why = ("no message was ever sent to it" if waiting == 0 else
               f"{out.plural(waiting, 'message')} sent to it {'is' if waiting == 1 else 'are'} "
               f"scheduled for later" if waiting else
               "nothing was sent to it, or what was is scheduled for later")
        click.echo(f"topic {topic!r} has no consumable message yet ({why}); waiting for "
                   f"its first message {until}", err=True)


def _scheduled_by_topic(consumer) -> dict[str, int] | None:
    """Messages waiting for their time (--delay, --deliver-at) per topic, or None when the
    server does not tell this user (STATS needs the admin permission)."""
    import json

    from fmq.errors import FMQError
    from fmq.protocol import Op

    try:
        stats = json.loads(consumer.call(Op.STATS, {})["json"])
    except FMQError:
        return None
    return stats.get("delivery", {}).get("timers_pending_by_topic", {})


def _consume(consumer, max_messages: int | None, idle_timeout: float | None,
             no_commit: bool, as_json: bool, count: list[int]) -> None:
    import time

    seen = 0
    last = time.monotonic()
    while max_messages is None or seen < max_messages:
        msgs = consumer.poll(1.0 if idle_timeout is None else min(1.0, idle_timeout))
        if not msgs:
            if idle_timeout is not None and time.monotonic() - last >= idle_timeout:
                break
            continue
        last = time.monotonic()
        if max_messages is not None:
            msgs = msgs[:max_messages - seen]
        for m in msgs:
            d = _message_dict(m)
            emit(d, as_json, consumed_line(m, d.get("body")))
        seen += len(msgs)
        count[0] = seen
        if not no_commit:
            if max_messages is not None and seen >= max_messages:
                _commit_upto(consumer, msgs)
            else:
                consumer.commit()


def consumed_line(m, body: str | None) -> str:
    """``topic/queue@offset stored-time [key=K] [tags=T]: body``: key and tags only when
    the message has them; a body that is not UTF-8 shows its size (``--json`` has it in
    base64). The time is the store time in UTC, to the millisecond."""
    labels = "".join(f" {name}={value}" for name, value in (("key", m.key), ("tags", m.tags))
                     if value)
    text = body if body is not None else f"<{out.size(len(m.body))}, not UTF-8>"
    stored = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(m.store_time / 1000))
    return (f"{m.topic}/{m.queue_id}@{m.queue_offset} {stored}.{m.store_time % 1000:03d}Z"
            f"{labels}: {text}")


def _commit_upto(consumer, printed: list) -> None:
    """With --max the last poll may hold more than was printed: commit only what was."""
    from fmq.protocol import Op

    last: dict[tuple[str, int], int] = {}
    for m in printed:
        last[(m.topic, m.queue_id)] = m.queue_offset + 1
    for (topic, qid), off in last.items():
        consumer.call(Op.COMMIT_OFFSET, {"group": consumer.group, "topic": topic,
                                         "queue_id": qid, "next_offset": off})


def register(cli: click.Group) -> None:
    for cmd in (server, produce, consume):  # stats: stats_cmds
        cli.add_command(cmd)
