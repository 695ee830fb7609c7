"""The asyncio server around one :class:`fmq.Broker`.

Layers (STYLE.md 8): :mod:`fmq.protocol` parses and encodes; :class:`_Connection` does the
framing on one socket and runs each request as its own task (pipelining: responses go out
in completion order, matched by request id); :class:`Server` holds the broker, the limits
and the handlers.

Blocking broker calls (waiting for the group-commit fsync, LMDB reads) run in a thread pool,
so the event loop never blocks and requests from all connections wait for the *same* fsync.
Feedback long polls block a thread too; they get their own pool so they never starve sends.
Pull long polls wait on the event loop instead (woken when a write completes).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fmq import __version__
from fmq.broker import Broker
from fmq.errors import (
    FMQError,
    InvalidArgument,
    ProtocolError,
    ServerBusy,
)
from fmq.message import Message, SendResult, StoredMessage
from fmq.protocol import (
    PREFIX_SIZE,
    PROTOCOL_VERSION,
    SCHEMA,
    Frame,
    Op,
    decode_request,
    encode_error,
    encode_response,
    frame_length,
    parse_frame,
)
from fmq.server.config import ServerConfig
from fmq.server.groups import GroupCoordinator
from fmq.tx.manager import TxState

logger = logging.getLogger("fmq.server")

Handler = Callable[["Server", "_Connection", dict], Awaitable[dict]]
_HANDLERS: dict[int, Handler] = {}


def handles(op: Op) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        _HANDLERS[op] = fn
        return fn
    return register


# ---------------------------------------------------------------- value conversion

def to_message(d: dict) -> Message:
    qid = d["queue_id"]
    return Message(d["topic"], d["body"], key=d["key"], tags=d["tags"],
                   properties=d["properties"] or None, queue_id=None if qid < 0 else qid)


def from_result(r: SendResult) -> dict:
    return {"offset": r.offset, "queue_id": r.queue_id, "queue_offset": r.queue_offset}


def from_stored(m: StoredMessage) -> dict:
    return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "offset": m.offset, "body": m.body, "key": m.key, "tags": m.tags,
            "properties": m.properties or {}, "store_time": m.store_time}


def _tx_state(value: str, allowed: tuple[TxState, ...]) -> TxState:
    try:
        state = TxState(value)
    except ValueError:
        state = None
    if state not in allowed:
        raise InvalidArgument(f"transaction state must be one of "
                              f"{', '.join(s.value for s in allowed)}, not {value!r}")
    return state


# ---------------------------------------------------------------- connection


class _Connection:
    """One client socket: reads frames, runs each request as a task, writes responses."""

    def __init__(self, server: Server, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, conn_id: int) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.id = conn_id
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.tasks: set[asyncio.Task] = set()
        self.closing = False

    async def send(self, data: bytes) -> None:
        if self.closing and self.writer.is_closing():
            return
        try:
            self.writer.write(data)
            await self.writer.drain()
        except (ConnectionError, RuntimeError):
            pass  # the peer went away; its requests' answers have nowhere to go

    async def fail(self, opcode: int, request_id: int, exc: FMQError, why: str) -> None:
        """Answer with an error, then close this connection (malformed input: the stream
        cannot be trusted any more). Other connections are untouched."""
        logger.warning("connection %d from %s: %s: %s; closing it", self.id, self.peer, why, exc)
        self.server.protocol_errors += 1
        await self.send(encode_error(opcode, request_id, exc))
        self.close()

    def close(self) -> None:
        self.closing = True
        if not self.writer.is_closing():
            self.writer.close()

    async def run(self) -> None:
        srv = self.server
        cfg = srv.config
        reader = self.reader
        while not self.closing:
            try:
                prefix = await reader.readexactly(PREFIX_SIZE)
            except (asyncio.IncompleteReadError, ConnectionError):
                # Clean EOF between frames (or a reset). Requests in flight still get their
                # answers, but pull long polls end now: nobody will send more.
                self.closing = True
                srv._wake_pullers()
                return
            try:
                n = frame_length(prefix, cfg.max_frame_size)
            except ProtocolError as exc:
                await self.fail(0, 0, exc, "bad frame length")
                return
            try:
                body = await reader.readexactly(n)
            except asyncio.IncompleteReadError as exc:
                logger.warning("connection %d from %s: closed inside a frame (%d of %d "
                               "bytes)", self.id, self.peer, len(exc.partial), n)
                srv.protocol_errors += 1
                return
            except ConnectionError:
                return
            try:
                frame = parse_frame(body)
            except ProtocolError as exc:
                await self.fail(body[1] if len(body) > 1 else 0, 0, exc, "malformed header")
                return
            if frame.version != PROTOCOL_VERSION or frame.is_response:
                why = ("unsupported protocol version" if frame.version != PROTOCOL_VERSION
                       else "a response frame sent to the server")
                await self.fail(frame.opcode, frame.request_id, ProtocolError(
                    f"{why} ({frame.version}); this server speaks version {PROTOCOL_VERSION} "
                    f"requests, see docs/protocol.md"), why)
                return
            if len(self.tasks) >= cfg.max_in_flight:
                srv.busy_refusals += 1
                await self.send(encode_error(frame.opcode, frame.request_id, ServerBusy(
                    f"{cfg.max_in_flight} requests of this connection are in flight "
                    f"(max_in_flight); wait for answers before sending more")))
                continue
            if srv.stopping:
                await self.send(encode_error(frame.opcode, frame.request_id, ServerBusy(
                    "the server is shutting down; retry against the restarted server")))
                continue
            task = asyncio.create_task(self.handle(frame))
            self.tasks.add(task)
            srv.all_tasks.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        self.server.all_tasks.discard(task)

    async def handle(self, frame: Frame) -> None:
        srv = self.server
        op, rid = frame.opcode, frame.request_id
        handler = _HANDLERS.get(op)
        if handler is None:
            # Framing is intact, so the connection stays usable: newer clients can probe.
            await self.send(encode_error(op, rid, ProtocolError(
                f"unknown opcode {op}; this server knows {sorted(int(o) for o in SCHEMA)}")))
            return
        try:
            req = decode_request(frame)
        except ProtocolError as exc:
            await self.fail(op, rid, exc, f"malformed {Op(op).name} payload")
            return
        srv.requests += 1
        try:
            result = await handler(srv, self, req)
            data = encode_response(op, rid, result)
        except FMQError as exc:
            data = encode_error(op, rid, exc)
        except Exception as exc:  # noqa: BLE001 - a bug must not kill the connection
            logger.exception("request %s failed unexpectedly", Op(op).name)
            data = encode_error(op, rid, exc)
        await self.send(data)


# ---------------------------------------------------------------- server


class Server:
    """Serve ``broker`` on ``config.host:config.port`` until :meth:`request_stop`."""

    def __init__(self, broker: Broker, config: ServerConfig) -> None:
        self.broker = broker
        self.config = config
        self.groups = GroupCoordinator(broker.config.queues_per_topic,
                                       config.group_session_timeout_ms)
        self.workers = ThreadPoolExecutor(config.worker_threads, thread_name_prefix="fmq-worker")
        self.pollers = ThreadPoolExecutor(config.long_poll_threads,
                                          thread_name_prefix="fmq-longpoll")
        self.connections: dict[int, _Connection] = {}
        self.all_tasks: set[asyncio.Task] = set()
        self.stopping = False
        self.port = config.port
        self.requests = 0
        self.protocol_errors = 0
        self.busy_refusals = 0
        self.started = time.time()
        self._next_conn = 0
        self._server: asyncio.base_events.Server | None = None
        self._stop_event: asyncio.Event | None = None
        self._data_event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ running

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._data_event = asyncio.Event()
        self._server = await asyncio.start_server(
            self._accept, self.config.host, self.config.port,
            backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        logger.info("listening on %s:%d (protocol %d, max frame %d bytes, %d worker threads)",
                    self.config.host, self.port, PROTOCOL_VERSION, self.config.max_frame_size,
                    self.config.worker_threads)

    async def serve(self, install_signals: bool = True) -> None:
        """Start, serve until SIGINT/SIGTERM (or :meth:`request_stop`), then shut down
        gracefully: stop accepting, finish in-flight requests, close the broker."""
        await self.start()
        if install_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._loop.add_signal_handler(sig, self.request_stop, sig.name)
        expiry = asyncio.create_task(self._expire_members())
        await self._stop_event.wait()
        expiry.cancel()
        await self.shutdown()

    def request_stop(self, why: str = "stop requested") -> None:
        if not self.stopping:
            logger.info("%s: stopping (no new connections or requests; finishing in-flight)",
                        why)
        self.stopping = True
        self._wake_pullers()
        if self._stop_event is not None:
            self._stop_event.set()

    async def shutdown(self) -> None:
        self.stopping = True
        if self._server is not None:
            self._server.close()
        pending = list(self.all_tasks)
        if pending:
            _, late = await asyncio.wait(pending, timeout=self.config.shutdown_grace_ms / 1000)
            if late:
                logger.warning("%d requests still running after %d ms; abandoning them",
                               len(late), self.config.shutdown_grace_ms)
        for conn in list(self.connections.values()):
            conn.close()
        loop = asyncio.get_running_loop()
        self.pollers.shutdown(wait=False, cancel_futures=True)
        # close() flushes, indexes and checkpoints: a clean start replays nothing.
        await loop.run_in_executor(self.workers, self.broker.close)
        self.workers.shutdown(wait=True)
        cp = self.broker.last_checkpoint
        logger.info("stopped after %d requests; checkpoint at %s", self.requests,
                    cp.recovery_offset if cp else "none")

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._next_conn += 1
        conn = _Connection(self, reader, writer, self._next_conn)
        if self.stopping or len(self.connections) >= self.config.max_connections:
            why = ("the server is shutting down" if self.stopping else
                   f"{len(self.connections)} connections are open (max_connections)")
            logger.warning("refused connection from %s: %s", conn.peer, why)
            await conn.send(encode_error(0, 0, ServerBusy(f"{why}; retry later")))
            conn.close()
            return
        self.connections[conn.id] = conn
        logger.info("connection %d from %s", conn.id, conn.peer)
        try:
            await conn.run()
        except Exception:  # noqa: BLE001 - one connection's bug must not stop the server
            logger.exception("connection %d from %s failed", conn.id, conn.peer)
        finally:
            # Let its requests finish (a send being fsync'd still completes), then forget it.
            if conn.tasks:
                await asyncio.wait(list(conn.tasks))
            conn.close()
            del self.connections[conn.id]
            for group, member in self.groups.drop_owner(conn):
                logger.info("group %s: member %s left with its connection", group, member)
            logger.info("connection %d from %s closed", conn.id, conn.peer)

    async def _expire_members(self) -> None:
        tick = min(1.0, self.config.group_session_timeout_ms / 4000)
        while True:
            await asyncio.sleep(tick)
            for group, member in self.groups.expire():
                logger.info("group %s: member %s expired (no heartbeat)", group, member)

    # ------------------------------------------------------------------ helpers

    def run(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """Run a blocking broker call in the worker pool."""
        return self._loop.run_in_executor(self.workers, fn, *args)

    def data_arrived(self) -> None:
        """A write completed: wake pull long polls."""
        self._wake_pullers()

    def _wake_pullers(self) -> None:
        ev = self._data_event
        if ev is not None:
            self._data_event = asyncio.Event()
            ev.set()

    def wait_ms(self, requested: int) -> float:
        return min(requested, self.config.max_wait_ms) / 1000.0

    def stats(self) -> dict:
        s = self.broker.stats()
        s["server"] = {
            "version": __version__,
            "connections": len(self.connections),
            "requests": self.requests,
            "in_flight": len(self.all_tasks),
            "protocol_errors": self.protocol_errors,
            "busy_refusals": self.busy_refusals,
            "uptime_s": round(time.time() - self.started, 3),
            "groups": self.groups.describe(),
        }
        return s


# ---------------------------------------------------------------- handlers


@handles(Op.PING)
async def _ping(srv: Server, conn: _Connection, req: dict) -> dict:
    cfg = srv.config
    return {"server_version": __version__, "protocol_version": PROTOCOL_VERSION,
            "queues_per_topic": srv.broker.config.queues_per_topic,
            "max_frame_size": cfg.max_frame_size, "max_in_flight": cfg.max_in_flight}


@handles(Op.SEND)
async def _send(srv: Server, conn: _Connection, req: dict) -> dict:
    result = await srv.run(srv.broker.send, to_message(req["message"]))
    srv.data_arrived()
    return {"result": from_result(result)}


@handles(Op.SEND_BATCH)
async def _send_batch(srv: Server, conn: _Connection, req: dict) -> dict:
    msgs = [to_message(m) for m in req["messages"]]
    results = await srv.run(srv.broker.send_batch, msgs)
    srv.data_arrived()
    return {"results": [from_result(r) for r in results]}


@handles(Op.PREPARE)
async def _prepare(srv: Server, conn: _Connection, req: dict) -> dict:
    msgs = [to_message(m) for m in req["messages"]]
    tx_id = await srv.run(srv.broker.prepare, msgs, req["producer_group"], req["tx_id"])
    return {"tx_id": tx_id}


@handles(Op.COMMIT)
async def _commit(srv: Server, conn: _Connection, req: dict) -> dict:
    state = await srv.run(srv.broker.commit, req["tx_id"])
    srv.data_arrived()
    return {"state": state.value}


@handles(Op.ROLLBACK)
async def _rollback(srv: Server, conn: _Connection, req: dict) -> dict:
    state = await srv.run(srv.broker.rollback, req["tx_id"])
    return {"state": state.value}


@handles(Op.POLL_UNCERTAIN)
async def _poll_uncertain(srv: Server, conn: _Connection, req: dict) -> dict:
    wait_ms = int(srv.wait_ms(req["wait_ms"]) * 1000)
    if srv.stopping:
        wait_ms = 0
    txs = await srv._loop.run_in_executor(
        srv.pollers, srv.broker.poll_uncertain, req["producer_group"], req["max_items"],
        req["lease_ms"], wait_ms)
    return {"transactions": [
        {"tx_id": t.tx_id, "producer_group": t.producer_group,
         "prepare_offset": t.prepare_offset, "store_time": t.store_time, "checks": t.checks,
         "messages": [dict(m, properties=m.get("properties") or {}) for m in t.messages]}
        for t in txs]}


@handles(Op.ANSWER_UNCERTAIN)
async def _answer_uncertain(srv: Server, conn: _Connection, req: dict) -> dict:
    state = _tx_state(req["state"], (TxState.COMMIT, TxState.ROLLBACK, TxState.UNKNOWN))
    final = await srv.run(srv.broker.answer_uncertain, req["tx_id"], state)
    if final == TxState.COMMIT:
        srv.data_arrived()
    return {"state": final.value}


def _pull_now(broker: Broker, topic: str, queue_id: int, offset: int, max_messages: int,
              catch_up: bool) -> tuple[list[StoredMessage], int, int]:
    if catch_up:  # woken by a write: it is flushed, let the dispatcher index it
        broker.wait_indexed(0.5)
    msgs = broker.pull(topic, queue_id, offset, max_messages)
    lo, hi = broker.queue_range(topic, queue_id)
    return msgs, lo, hi


@handles(Op.PULL)
async def _pull(srv: Server, conn: _Connection, req: dict) -> dict:
    loop = srv._loop
    deadline = loop.time() + srv.wait_ms(req["wait_ms"])
    args = (req["topic"], req["queue_id"], req["offset"], max(1, min(req["max_messages"], 4096)))
    catch_up = False
    while True:
        event = srv._data_event
        msgs, lo, hi = await srv.run(_pull_now, srv.broker, *args, catch_up)
        remaining = deadline - loop.time()
        if msgs or remaining <= 0 or srv.stopping or conn.closing:
            break
        # Re-check at least every 100 ms: a write may be flushed before it is indexed.
        try:
            await asyncio.wait_for(event.wait(), min(remaining, 0.1))
            catch_up = True
        except TimeoutError:
            catch_up = False
    return {"messages": [from_stored(m) for m in msgs], "min_offset": lo, "next_offset": hi}


@handles(Op.COMMIT_OFFSET)
async def _commit_offset(srv: Server, conn: _Connection, req: dict) -> dict:
    await srv.run(srv.broker.commit_offset, req["group"], req["topic"], req["queue_id"],
                  req["next_offset"])
    return {}


@handles(Op.FETCH_OFFSET)
async def _fetch_offset(srv: Server, conn: _Connection, req: dict) -> dict:
    off = await srv.run(srv.broker.committed_offset, req["group"], req["topic"], req["queue_id"])
    return {"offset": -1 if off is None else off}


def _assignment(pairs: list[tuple[str, int]]) -> list[dict]:
    return [{"topic": t, "queue_id": q} for t, q in pairs]


@handles(Op.GROUP_JOIN)
async def _group_join(srv: Server, conn: _Connection, req: dict) -> dict:
    member, gen, assigned = srv.groups.join(req["group"], req["member_id"], req["topics"], conn)
    logger.info("group %s: member %s joined from %s (generation %d, %d queues)",
                req["group"], member, conn.peer, gen, len(assigned))
    cfg = srv.config
    return {"member_id": member, "generation": gen, "assignment": _assignment(assigned),
            "queues_per_topic": srv.broker.config.queues_per_topic,
            "heartbeat_interval_ms": cfg.group_heartbeat_interval_ms,
            "session_timeout_ms": cfg.group_session_timeout_ms}


@handles(Op.GROUP_HEARTBEAT)
async def _group_heartbeat(srv: Server, conn: _Connection, req: dict) -> dict:
    gen, assigned = srv.groups.heartbeat(req["group"], req["member_id"], req["topics"], conn)
    return {"generation": gen, "assignment": _assignment(assigned)}


@handles(Op.GROUP_LEAVE)
async def _group_leave(srv: Server, conn: _Connection, req: dict) -> dict:
    if srv.groups.leave(req["group"], req["member_id"]):
        logger.info("group %s: member %s left", req["group"], req["member_id"])
    return {}


@handles(Op.QUERY_KEY)
async def _query_key(srv: Server, conn: _Connection, req: dict) -> dict:
    msgs = await srv.run(srv.broker.messages_by_key, req["topic"], req["key"],
                         max(1, min(req["limit"], 4096)))
    return {"messages": [from_stored(m) for m in msgs]}


@handles(Op.OFFSET_FOR_TIME)
async def _offset_for_time(srv: Server, conn: _Connection, req: dict) -> dict:
    off = await srv.run(srv.broker.offset_for_time, req["topic"], req["queue_id"],
                        req["timestamp_ms"])
    return {"offset": off}


@handles(Op.QUEUE_RANGE)
async def _queue_range(srv: Server, conn: _Connection, req: dict) -> dict:
    lo, hi = await srv.run(srv.broker.queue_range, req["topic"], req["queue_id"])
    return {"min_offset": lo, "next_offset": hi}


@handles(Op.STATS)
async def _stats(srv: Server, conn: _Connection, req: dict) -> dict:
    stats = await srv.run(srv.stats)
    return {"json": json.dumps(stats, sort_keys=True, default=str)}


@handles(Op.LIST_TX)
async def _list_tx(srv: Server, conn: _Connection, req: dict) -> dict:
    txs = await srv.run(srv.broker.open_transactions)
    return {"transactions": [{k: t[k] for k in ("tx_id", "producer_group", "state", "age_ms",
                                                "checks", "messages", "prepare_offset")}
                             for t in txs]}


@handles(Op.RESOLVE_TX)
async def _resolve_tx(srv: Server, conn: _Connection, req: dict) -> dict:
    decision = _tx_state(req["decision"], (TxState.COMMIT, TxState.ROLLBACK))
    fn = srv.broker.commit if decision == TxState.COMMIT else srv.broker.rollback
    state = await srv.run(fn, req["tx_id"])
    logger.info("operator at %s resolved transaction %s: %s", conn.peer, req["tx_id"],
                state.value)
    if state == TxState.COMMIT:
        srv.data_arrived()
    return {"state": state.value}


# ---------------------------------------------------------------- entry point


def run_server(data_dir: str, broker_config: Any = None,
               server_config: ServerConfig | None = None) -> None:
    """Open the broker (running recovery), serve until SIGINT/SIGTERM, close cleanly.
    Raises DataDirLocked when another process holds ``data_dir``."""
    server_config = server_config or ServerConfig()
    broker = Broker.open(data_dir, broker_config)
    rec = broker.recovery
    logger.info("recovery: replayed %d records from offset %d, %d open transactions, "
                "torn tail %s", rec.records_replayed, rec.start_offset,
                rec.open_transactions, rec.torn_tail)
    server = Server(broker, server_config)
    try:
        asyncio.run(server.serve())
    finally:
        broker.close()  # no-op after a graceful shutdown; releases the dir after an error
