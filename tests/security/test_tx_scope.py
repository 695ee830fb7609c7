"""Transactions are scoped to their producer group, and the right to end one holds when
the operation runs, not only when its request arrived. A real server on 127.0.0.1 with
SCRAM users: ``victim`` may run transactions of producer group ``shop``, ``mallory`` only
of ``mallory-pg``.

The races are made deterministic with one worker thread: mallory's cheap requests
(offset commits, thousands, each waiting for its fdatasync) fill the worker queue, so a
COMMIT or ROLLBACK she sends is admitted at once but runs only after the victim's PREPARE
of the same id is in place."""

from __future__ import annotations

import itertools
import socket

import pytest

from fmq.client import Client
from fmq.client.auth import Credentials, log_in
from fmq.errors import FMQError, UnknownTransaction
from fmq.protocol import FrameDecoder, Op, decode_error, decode_response, encode_request
from tests.server.harness import ServerProcess

from .conftest import FAST, PASSWORD, add_rule_offline, add_user_offline

pytestmark = pytest.mark.timeout(300)

#: Offset commits queued ahead of mallory's COMMIT or ROLLBACK, per connection: below
#: max_in_flight, so the server reads (and admits) every one of them at once.
CHEAP = 200
#: Connections that queue them: seconds of work for the one worker thread.
FILLERS = 4

RULES = [
    ("--principal", "admin", "--operation", "all", "--cluster"),
    ("--principal", "admin", "--operation", "all", "--topic", "", "--prefix"),
    ("--principal", "admin", "--operation", "all", "--producer-group", "", "--prefix"),
    ("--principal", "victim", "--operation", "transaction", "--producer-group", "shop"),
    ("--principal", "victim", "--operation", "produce", "--topic", "orders"),
    ("--principal", "mallory", "--operation", "transaction", "--producer-group",
     "mallory-pg"),
    ("--principal", "mallory", "--operation", "produce", "--topic", "orders"),
    ("--principal", "mallory", "--operation", "commit-offsets", "--group", "m-g"),
]


def message(body: bytes) -> dict:
    return {"topic": "orders", "body": body, "key": None, "tags": None, "properties": {},
            "queue_id": 0}


class RawSession:
    """A logged-in connection that writes frames as given, several in one write, and
    collects the answers by request id."""

    def __init__(self, address: str, user: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.decoder = FrameDecoder()
        self.answers: dict[int, object] = {}
        self.ids = itertools.count(1)
        log_in(lambda op, fields: self._checked(self.call(op, fields)),
               Credentials(user, PASSWORD))

    @staticmethod
    def _checked(answer: object) -> dict:
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def frame(self, op: Op, fields: dict) -> tuple[int, bytes]:
        rid = next(self.ids)
        return rid, encode_request(op, rid, fields)

    def write(self, frames: list[bytes]) -> None:
        self.sock.sendall(b"".join(frames))

    def _read(self, timeout: float) -> bool:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (TimeoutError, BlockingIOError):
            return False
        assert data, "the server closed the connection"
        for f in self.decoder.feed(data):
            self.answers[f.request_id] = decode_error(f) if f.is_error else decode_response(f)
        return True

    def wait(self, rid: int, timeout: float = 60.0) -> object:
        for _ in range(int(timeout * 10)):
            if rid in self.answers:
                return self.answers[rid]
            self._read(0.1)
        raise AssertionError(f"request {rid} not answered in {timeout}s")

    def answered(self, rid: int) -> bool:
        """Whether ``rid`` has an answer, reading what has arrived without waiting."""
        while rid not in self.answers and self._read(0.001):
            pass
        return rid in self.answers

    def call(self, op: Op, fields: dict) -> object:
        rid, data = self.frame(op, fields)
        self.write([data])
        return self.wait(rid)

    def close(self) -> None:
        self.sock.close()


def start(tmp_path, flush_mode: str = "sync") -> ServerProcess:
    data = str(tmp_path / "data")
    for user in ("admin", "victim", "mallory"):
        add_user_offline(data, user)
    for rule in RULES:
        add_rule_offline(data, *rule)
    config = {**FAST, "flush_mode": flush_mode,
              "server": {**FAST["server"], "worker_threads": 1,
                         "auth_failure_delay_ms": 1, "auth_failure_max_delay_ms": 20}}
    srv = ServerProcess(data, config, client_options={"user": "admin",
                                                      "password": PASSWORD})
    return srv.start()


@pytest.fixture
def server(tmp_path):
    srv = start(tmp_path)
    yield srv
    srv.kill()


@pytest.fixture
def async_server(tmp_path):
    srv = start(tmp_path, "async")
    yield srv
    srv.kill()


def cheap_frames(mallory: RawSession, count: int = CHEAP) -> list[bytes]:
    return [mallory.frame(Op.COMMIT_OFFSET, {"group": "m-g", "topic": "orders",
                                             "queue_id": 0, "next_offset": 0})[1]
            for _ in range(count)]


def admitted(session: RawSession, op: Op, fields: dict, before: list[bytes] = ()) -> int:
    """Write ``before``, ``op`` and a PING in one write; return ``op``'s request id once
    the PING is answered (every request before it has been admitted by then)."""
    rid, frame = session.frame(op, fields)
    ping, ping_frame = session.frame(Op.PING, {})
    session.write([*before, frame, ping_frame])
    assert isinstance(session.wait(ping), dict)
    return rid


def fill_worker_queue(address: str) -> list[RawSession]:
    """FILLERS connections of mallory's, each with CHEAP offset commits admitted and
    queued for the worker thread (close them at the end)."""
    fillers = [RawSession(address, "mallory") for _ in range(FILLERS)]
    for filler in fillers:
        filler.write(cheap_frames(filler))
    for filler in fillers:
        admitted(filler, Op.PING, {})
    return fillers


def committed_bodies(srv: ServerProcess) -> list[bytes]:
    with Client(srv.address, user="admin", password=PASSWORD, retries=0) as admin:
        got = admin.call(Op.PULL, {"topic": "orders", "queue_id": 0, "offset": 0,
                                   "max_messages": 100, "wait_ms": 0})["messages"]
    return [m["body"] for m in got]


def test_a_rollback_queued_before_anothers_prepare_does_not_end_it(server):
    """mallory's ROLLBACK of order-1000 is admitted while no such transaction exists and
    runs after the victim prepared it: it must not roll back the victim's transaction."""
    mallory, victim = RawSession(server.address, "mallory"), RawSession(server.address,
                                                                         "victim")
    fillers = fill_worker_queue(server.address)
    try:
        rollback = admitted(mallory, Op.ROLLBACK, {"producer_group": "mallory-pg",
                                                   "tx_id": "order-1000"})
        prepared = victim.call(Op.PREPARE, {"producer_group": "shop", "tx_id": "order-1000",
                                            "messages": [message(b"paid 1000")]})
        assert prepared == {"tx_id": "order-1000"}, prepared
        # The race was on: the ROLLBACK had not run when the PREPARE was answered.
        assert not mallory.answered(rollback)
        assert isinstance(mallory.wait(rollback), UnknownTransaction), mallory.answers[rollback]
        committed = victim.call(Op.COMMIT, {"producer_group": "shop", "tx_id": "order-1000"})
        assert committed == {"state": "commit"}, committed
    finally:
        for session in [mallory, victim, *fillers]:
            session.close()
    assert committed_bodies(server) == [b"paid 1000"]


def test_with_async_flush_a_commit_queued_before_anothers_prepare_does_not_end_it(
        async_server):
    """In flush_mode async a PREPARE runs in the worker threads too: mallory's COMMIT,
    admitted while the victim's PREPARE waits in the queue, must not commit it."""
    srv = async_server
    mallory, victim = RawSession(srv.address, "mallory"), RawSession(srv.address, "victim")
    fillers = fill_worker_queue(srv.address)  # before the victim's PREPARE joins the queue
    try:
        prepare = admitted(victim, Op.PREPARE, {"producer_group": "shop",
                                                "tx_id": "order-3000",
                                                "messages": [message(b"paid 3000")]})
        commit = admitted(mallory, Op.COMMIT, {"producer_group": "mallory-pg",
                                               "tx_id": "order-3000"})
        # The race was on: the PREPARE had not run when the COMMIT was admitted.
        assert not victim.answered(prepare)
        assert victim.wait(prepare) == {"tx_id": "order-3000"}, victim.answers[prepare]
        assert isinstance(mallory.wait(commit), UnknownTransaction), mallory.answers[commit]
        # The victim decided to roll back: that is what happens.
        rolled = victim.call(Op.ROLLBACK, {"producer_group": "shop", "tx_id": "order-3000"})
        assert rolled == {"state": "rollback"}, rolled
    finally:
        for session in [mallory, victim, *fillers]:
            session.close()
    assert committed_bodies(srv) == []


def test_the_same_id_in_two_groups_is_two_transactions(server):
    with Client(server.address, user="mallory", password=PASSWORD, retries=0) as mallory, \
            Client(server.address, user="victim", password=PASSWORD, retries=0) as victim:
        mine = mallory.call(Op.PREPARE, {"producer_group": "mallory-pg",
                                         "tx_id": "order-2000",
                                         "messages": [message(b"mallory's")]})
        theirs = victim.call(Op.PREPARE, {"producer_group": "shop", "tx_id": "order-2000",
                                          "messages": [message(b"victim's")]})
        assert mine == theirs == {"tx_id": "order-2000"}
        # Each ends its own: a commit in one group leaves the other open, then both commit.
        assert victim.call(Op.COMMIT, {"producer_group": "shop", "tx_id": "order-2000"}
                           ) == {"state": "commit"}
        with Client(server.address, user="admin", password=PASSWORD, retries=0) as admin:
            still_open = admin.call(Op.LIST_TX, {})["transactions"]
        assert [(t["producer_group"], t["tx_id"]) for t in still_open] == [
            ("mallory-pg", "order-2000")]
        assert mallory.call(Op.COMMIT, {"producer_group": "mallory-pg",
                                        "tx_id": "order-2000"}) == {"state": "commit"}
    assert sorted(committed_bodies(server)) == [b"mallory's", b"victim's"]


def error_of(client: Client, op: Op, fields: dict) -> FMQError:
    try:
        answer = client.call(op, fields, timeout=30)
    except FMQError as exc:
        return exc
    raise AssertionError(f"{op.name} {fields} was answered {answer}")


def test_errors_do_not_reveal_another_groups_transactions(server):
    """An id the victim's group has open, committed or rolled back is, to mallory, an id
    never used: the same UnknownTransaction as for an id nobody used, and free to
    prepare in her own group."""
    with Client(server.address, user="mallory", password=PASSWORD, retries=0) as mallory, \
            Client(server.address, user="victim", password=PASSWORD, retries=0) as victim:
        for tx_id, end in (("v-open", None), ("v-done", Op.COMMIT),
                           ("v-undone", Op.ROLLBACK)):
            victim.call(Op.PREPARE, {"producer_group": "shop", "tx_id": tx_id,
                                     "messages": [message(tx_id.encode())]})
            if end is not None:
                victim.call(end, {"producer_group": "shop", "tx_id": tx_id})

        def shape(error: FMQError, tx_id: str) -> tuple[type, str]:
            return type(error), str(error).replace(tx_id, "ID")

        never = {op: shape(error_of(mallory, op, {"producer_group": "mallory-pg",
                                                  "tx_id": "never-used"}), "never-used")
                 for op in (Op.COMMIT, Op.ROLLBACK)}
        assert {kind for kind, _ in never.values()} == {UnknownTransaction}
        # Asking about an unused id records nothing: it can still be prepared.
        assert mallory.call(Op.PREPARE, {"producer_group": "mallory-pg", "tx_id": "never-used",
                                         "messages": [message(b"n")]}) == {"tx_id": "never-used"}
        for tx_id in ("v-open", "v-done", "v-undone"):
            for op in (Op.COMMIT, Op.ROLLBACK):
                got = error_of(mallory, op, {"producer_group": "mallory-pg", "tx_id": tx_id})
                assert shape(got, tx_id) == never[op], (tx_id, op.name, got)
            answered = error_of(mallory, Op.ANSWER_UNCERTAIN, {
                "producer_group": "mallory-pg", "tx_id": tx_id, "state": "rollback"})
            assert isinstance(answered, UnknownTransaction), (tx_id, answered)
            # Free in her own group: her PREPARE under the same id is stored.
            assert mallory.call(Op.PREPARE, {"producer_group": "mallory-pg", "tx_id": tx_id,
                                             "messages": [message(b"m")]}) == {"tx_id": tx_id}
        # Nothing she did touched the victim's open transaction.
        assert victim.call(Op.COMMIT, {"producer_group": "shop", "tx_id": "v-open"}
                           ) == {"state": "commit"}
