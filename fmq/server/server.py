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
import socket
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fmq import __version__
from fmq.broker import Broker
from fmq.errors import (
    ConfigError,
    FMQError,
    InvalidArgument,
    ProtocolError,
    ServerBusy,
)
from fmq.message import Message, SendResult, StoredMessage, check_fits, check_message
from fmq.protocol import (
    PROTOCOL_VERSION,
    SCHEMA,
    Frame,
    FrameDecoder,
    Op,
    decode_request,
    encode_error,
    encode_response,
)
from fmq.server.config import ServerConfig
from fmq.server.groups import GroupCoordinator
from fmq.tx.manager import TxState

logger = logging.getLogger("fmq.server")

#: Bytes of message bodies one PULL answer carries at most (at least one message).
RESPONSE_BUDGET = 8 * 1024 * 1024

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


class _Connection(asyncio.Protocol):
    """One client socket: parses frames as bytes arrive, runs each request as a task,
    writes each response as soon as it is ready (pipelining)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.id = 0
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(server.config.max_frame_size)
        self.tasks: set[asyncio.Task] = set()
        self.closing = False  # no more requests will be read
        self.eof = False
        self._paused = False

    # ------------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:  # answers are small and latency matters: no Nagle delay
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.server._connection_made(self)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            # The length prefix is bad: the stream cannot be resynchronised.
            self.fail(0, 0, exc, "bad frame")
            return
        for frame in frames:
            self.on_frame(frame)
            if self.closing:
                return

    def eof_received(self) -> bool:
        if self.decoder.buffered:
            logger.warning("connection %d from %s: closed inside a frame (%d bytes "
                           "buffered)", self.id, self.peer, self.decoder.buffered)
            self.server.protocol_errors += 1
        # Requests in flight still get their answers (half-close); pull long polls end now:
        # nobody will send more.
        self.eof = True
        self.closing = True
        self.server._wake_pullers(self)
        if not self.tasks:
            self.close()
        return True

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closing = True
        self.server._connection_lost(self)

    def pause_writing(self) -> None:
        # The peer does not read its answers: stop reading its requests (back-pressure).
        self._paused = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    # ------------------------------------------------------------------ requests

    def send(self, data: bytes) -> None:
        t = self.transport
        if t is not None and not t.is_closing():
            t.write(data)

    def fail(self, opcode: int, request_id: int, exc: FMQError, why: str) -> None:
        """Answer with an error, then close this connection (malformed input: the stream
        cannot be trusted any more). Other connections are untouched."""
        logger.warning("connection %d from %s: %s: %s; closing it", self.id, self.peer, why, exc)
        self.server.protocol_errors += 1
        self.send(encode_error(opcode, request_id, exc))
        self.close()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # flushes what is buffered first

    def on_frame(self, frame: Frame) -> None:
        srv = self.server
        cfg = srv.config
        if frame.version != PROTOCOL_VERSION or frame.is_response:
            why = ("unsupported protocol version" if frame.version != PROTOCOL_VERSION
                   else "a response frame sent to the server")
            self.fail(frame.opcode, frame.request_id, ProtocolError(
                f"{why} ({frame.version}); this server speaks version {PROTOCOL_VERSION} "
                f"requests, see docs/protocol.md"), why)
            return
        if len(self.tasks) >= cfg.max_in_flight:
            srv.busy_refusals += 1
            self.send(encode_error(frame.opcode, frame.request_id, ServerBusy(
                f"{cfg.max_in_flight} requests of this connection are in flight "
                f"(max_in_flight); wait for answers before sending more")))
            return
        if srv.stopping:
            self.send(encode_error(frame.opcode, frame.request_id, ServerBusy(
                "the server is shutting down; retry against the restarted server")))
            return
        task = asyncio.ensure_future(self.handle(frame))
        self.tasks.add(task)
        srv.all_tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        self.server.all_tasks.discard(task)
        if self.eof and not self.tasks:
            self.close()

    async def handle(self, frame: Frame) -> None:
        srv = self.server
        op, rid = frame.opcode, frame.request_id
        handler = _HANDLERS.get(op)
        if handler is None:
            # Framing is intact, so the connection stays usable: newer clients can probe.
            self.send(encode_error(op, rid, ProtocolError(
                f"unknown opcode {op}; this server knows {sorted(int(o) for o in SCHEMA)}")))
            return
        try:
            req = decode_request(frame)
        except ProtocolError as exc:
            self.fail(op, rid, exc, f"malformed {Op(op).name} payload")
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
        # Free the in-flight slot before the answer leaves: the client may send its next
        # request the moment it reads this one, before the task's done-callback has run.
        self.tasks.discard(asyncio.current_task())
        self.send(data)


class _SendBatcher:
    """Coalesces the sends that arrive in one event-loop turn, from every connection, into
    one ``broker.send_batch``: one thread hand-off and one log-lock hold for all of them
    (the log's group commit then batches the fsync across batches in flight).

    Every message is checked before it joins a batch, so one bad message fails only its own
    request; what can still fail a batch (a failed fsync, a closed broker) fails every
    request in it, and none of them was acknowledged."""

    MAX_BATCH = 4096

    def __init__(self, server: Server) -> None:
        self.server = server
        self.pending: list[tuple[list[Message], asyncio.Future]] = []
        self.scheduled = False

    def submit(self, msgs: list[Message]) -> asyncio.Future:
        cfg = self.server.broker.config
        for m in msgs:
            check_message(m, cfg.max_message_size, cfg.queues_per_topic)
            check_fits(m, cfg.segment_size)
        loop = self.server._loop
        fut = loop.create_future()
        self.pending.append((msgs, fut))
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        self.scheduled = False
        pending, self.pending = self.pending, []
        while pending:
            batch: list[tuple[list[Message], asyncio.Future]] = []
            count = 0
            while pending and (not batch or count + len(pending[0][0]) <= self.MAX_BATCH):
                item = pending.pop(0)
                batch.append(item)
                count += len(item[0])
            msgs = [m for ms, _f in batch for m in ms]
            done = self.server._loop.run_in_executor(self.server.workers,
                                                     self.server.broker.send_batch, msgs)
            done.add_done_callback(lambda d, batch=batch: self._deliver(d, batch))

    def _deliver(self, done: asyncio.Future, batch: list) -> None:
        exc = done.exception()
        pos = 0
        results = None if exc is not None else done.result()
        for msgs, fut in batch:
            if fut.done():
                continue
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(results[pos:pos + len(msgs)])
            pos += len(msgs)
        if results:
            sent = [m for ms, _f in batch for m in ms]
            self.server.data_arrived({(m.topic, r.queue_id)
                                      for m, r in zip(sent, results, strict=True)})


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
        #: Pull long polls wait on these: one per (topic, queue) with waiters, one per
        #: connection (it closing), and one for "anything" (transaction commits, whose
        #: queues the broker does not report).
        self._queue_events: dict[tuple[str, int], asyncio.Event] = {}
        self._conn_events: dict[int, asyncio.Event] = {}
        self._any_event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ running

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._any_event = asyncio.Event()
        self.batcher = _SendBatcher(self)
        try:
            self._server = await self._loop.create_server(
                lambda: _Connection(self), self.config.host, self.config.port, backlog=1024)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {self.config.host}:{self.config.port} ({exc.strerror or exc});"
                f" stop the process using that port or choose another --port/--host") from None
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

    def _connection_made(self, conn: _Connection) -> None:
        self._next_conn += 1
        conn.id = self._next_conn
        if self.stopping or len(self.connections) >= self.config.max_connections:
            why = ("the server is shutting down" if self.stopping else
                   f"{len(self.connections)} connections are open (max_connections)")
            logger.warning("refused connection from %s: %s", conn.peer, why)
            conn.send(encode_error(0, 0, ServerBusy(f"{why}; retry later")))
            conn.close()
            return
        self.connections[conn.id] = conn
        logger.info("connection %d from %s", conn.id, conn.peer)

    def _connection_lost(self, conn: _Connection) -> None:
        # Requests still running finish (a send being fsync'd completes); answers are dropped.
        self._wake_pullers(conn)
        if self.connections.pop(conn.id, None) is None:
            return
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

    def data_arrived(self, queues: set[tuple[str, int]] | None = None) -> None:
        """A write completed: wake the pull long polls of ``queues`` (None: all of them)."""
        if queues is None:
            self._wake_pullers()
            return
        for q in queues:
            ev = self._queue_events.pop(q, None)
            if ev is not None:
                ev.set()

    def _wake_pullers(self, conn: _Connection | None = None) -> None:
        """Wake every pull long poll (or those of one connection)."""
        if conn is not None:
            ev = self._conn_events.pop(conn.id, None)
            if ev is not None:
                ev.set()
            return
        events = list(self._queue_events.values()) + list(self._conn_events.values())
        self._queue_events.clear()
        self._conn_events.clear()
        if self._any_event is not None:
            events.append(self._any_event)
            self._any_event = asyncio.Event()
        for ev in events:
            ev.set()

    def pull_waiters(self, topic: str, queue_id: int, conn: _Connection) -> list[asyncio.Event]:
        """The events a pull of ``topic``/``queue_id`` waits on: its queue, any commit, its
        connection closing."""
        qev = self._queue_events.get((topic, queue_id))
        if qev is None:
            qev = self._queue_events[(topic, queue_id)] = asyncio.Event()
        cev = self._conn_events.get(conn.id)
        if cev is None:
            cev = self._conn_events[conn.id] = asyncio.Event()
        return [qev, self._any_event, cev]

    def wait_ms(self, requested: int) -> float:
        return min(requested, self.config.max_wait_ms) / 1000.0

    def server_stats(self) -> dict:
        """The server's own counters (event-loop thread only: it reads loop state)."""
        return {
            "version": __version__,
            "connections": len(self.connections),
            "requests": self.requests,
            "in_flight": len(self.all_tasks),
            "protocol_errors": self.protocol_errors,
            "busy_refusals": self.busy_refusals,
            "uptime_s": round(time.time() - self.started, 3),
            "groups": self.groups.describe(),
        }


# ---------------------------------------------------------------- handlers


@handles(Op.PING)
async def _ping(srv: Server, conn: _Connection, req: dict) -> dict:
    cfg = srv.config
    return {"server_version": __version__, "protocol_version": PROTOCOL_VERSION,
            "queues_per_topic": srv.broker.config.queues_per_topic,
            "max_frame_size": cfg.max_frame_size, "max_in_flight": cfg.max_in_flight}


@handles(Op.SEND)
async def _send(srv: Server, conn: _Connection, req: dict) -> dict:
    results = await srv.batcher.submit([to_message(req["message"])])
    return {"result": from_result(results[0])}


@handles(Op.SEND_BATCH)
async def _send_batch(srv: Server, conn: _Connection, req: dict) -> dict:
    msgs = [to_message(m) for m in req["messages"]]
    results = await srv.batcher.submit(msgs) if msgs else []
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


#: A feedback long poll holds a thread for at most this long at a time, so a shutdown never
#: waits long for one (the interpreter joins pool threads at exit).
POLL_SLICE_S = 0.25


@handles(Op.POLL_UNCERTAIN)
async def _poll_uncertain(srv: Server, conn: _Connection, req: dict) -> dict:
    loop = srv._loop
    deadline = loop.time() + srv.wait_ms(req["wait_ms"])
    args = (req["producer_group"], req["max_items"], req["lease_ms"])
    while True:
        remaining = deadline - loop.time()
        if srv.stopping or conn.closing:
            remaining = 0.0
        slice_ms = int(max(0.0, min(remaining, POLL_SLICE_S)) * 1000)
        poll = loop.run_in_executor(srv.pollers, srv.broker.poll_uncertain, *args, slice_ms)
        # A shutdown answers a long poll (empty) at once. Anything the thread still picks is
        # leased but not delivered; the lease runs out and it is offered again later.
        stopped = asyncio.ensure_future(srv._stop_event.wait())
        await asyncio.wait([poll, stopped], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not poll.done():
            poll.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieve it
            return {"transactions": []}
        txs = poll.result()
        if txs or deadline - loop.time() <= 0 or srv.stopping or conn.closing:
            break
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
    if not msgs and not catch_up and broker.wait_indexed(0.5):
        # Nothing yet, but a write acknowledged just before may still be on its way to the
        # index: a pull sees every message acknowledged before it arrived.
        msgs = broker.pull(topic, queue_id, offset, max_messages)
    budget = RESPONSE_BUDGET  # keep the answer far below any client's frame limit
    for i, m in enumerate(msgs):
        budget -= len(m.body) + 256
        if budget < 0 and i > 0:
            msgs = msgs[:i]
            break
    lo, hi = broker.queue_range(topic, queue_id)
    return msgs, lo, hi


@handles(Op.PULL)
async def _pull(srv: Server, conn: _Connection, req: dict) -> dict:
    loop = srv._loop
    deadline = loop.time() + srv.wait_ms(req["wait_ms"])
    topic, queue_id = req["topic"], req["queue_id"]
    args = (topic, queue_id, req["offset"], max(1, min(req["max_messages"], 4096)))
    catch_up = False
    while True:
        # Take the events before reading, so a write landing meanwhile is not missed.
        events = srv.pull_waiters(topic, queue_id, conn)
        msgs, lo, hi = await srv.run(_pull_now, srv.broker, *args, catch_up)
        remaining = deadline - loop.time()
        if msgs or remaining <= 0 or srv.stopping or conn.closing:
            break
        waits = [asyncio.ensure_future(ev.wait()) for ev in events]
        # Re-check every second anyway (cheap insurance against a missed wake-up).
        done, _ = await asyncio.wait(waits, timeout=min(remaining, 1.0),
                                     return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        catch_up = bool(done)
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


def _indexed(broker: Broker, fn: Callable[..., Any], *args: Any) -> Any:
    """Queries see every message acknowledged before they arrived: an acknowledged message
    is flushed at once but indexed a moment later, so wait for the index first."""
    broker.wait_indexed(1.0)
    return fn(*args)


@handles(Op.QUERY_KEY)
async def _query_key(srv: Server, conn: _Connection, req: dict) -> dict:
    msgs = await srv.run(_indexed, srv.broker, srv.broker.messages_by_key, req["topic"],
                         req["key"], max(1, min(req["limit"], 4096)))
    return {"messages": [from_stored(m) for m in msgs]}


@handles(Op.OFFSET_FOR_TIME)
async def _offset_for_time(srv: Server, conn: _Connection, req: dict) -> dict:
    off = await srv.run(_indexed, srv.broker, srv.broker.offset_for_time, req["topic"],
                        req["queue_id"], req["timestamp_ms"])
    return {"offset": off}


@handles(Op.QUEUE_RANGE)
async def _queue_range(srv: Server, conn: _Connection, req: dict) -> dict:
    lo, hi = await srv.run(_indexed, srv.broker, srv.broker.queue_range, req["topic"],
                           req["queue_id"])
    return {"min_offset": lo, "next_offset": hi}


@handles(Op.STATS)
async def _stats(srv: Server, conn: _Connection, req: dict) -> dict:
    stats = await srv.run(srv.broker.stats)
    stats["server"] = srv.server_stats()
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
