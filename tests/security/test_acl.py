"""Access rules, exhaustively: for every operation of the protocol, a user without the
permission is refused and a user with exactly it gets past authorisation (a real server
on 127.0.0.1). The cases come from the schema table: an operation without a case here,
or without an entry in the server's table, fails the test."""

from __future__ import annotations

import pytest

from fmq.client import Client
from fmq.client.auth import make_user_fields
from fmq.errors import AccessDenied, AuthenticationRequired, FMQError
from fmq.protocol import SCHEMA, Op
from fmq.server.ops.table import OPERATIONS
from tests.server.harness import ServerProcess, broker_stats

from .conftest import FAST, PASSWORD, add_rule_offline, add_user_offline

pytestmark = pytest.mark.timeout(300)

MSG = {"topic": "t1", "body": b"x", "key": None, "tags": None, "properties": {},
       "queue_id": -1}
TX = object()  # stands for the id of a transaction of producer group "pg", opened per case

#: Every operation: a request, and what it needs (operation, resource type, name); None:
#: open to every session. Written by hand, independently of the server's table.
CASES: dict[Op, tuple[dict, list[tuple[str, str, str]] | None]] = {
    Op.PING: ({}, None),
    Op.HELLO: ({"protocol_version": 1, "client": "t"}, None),
    Op.AUTH_START: ({"mechanism": "SCRAM-SHA-256", "message": "n,,n=x,r=abc"}, None),
    Op.AUTH_FINISH: ({"message": "c=biws,r=abc,p=xyz"}, None),
    Op.SEND: ({"message": MSG}, [("produce", "topic", "t1")]),
    Op.SEND_BATCH: ({"messages": [MSG, MSG]}, [("produce", "topic", "t1")]),
    Op.PREPARE: ({"producer_group": "pg", "tx_id": None, "messages": [MSG]},
                 [("transaction", "producer-group", "pg"), ("produce", "topic", "t1")]),
    Op.COMMIT: ({"producer_group": "pg", "tx_id": TX},
                [("transaction", "producer-group", "pg")]),
    Op.ROLLBACK: ({"producer_group": "pg", "tx_id": TX},
                  [("transaction", "producer-group", "pg")]),
    Op.POLL_UNCERTAIN: ({"producer_group": "pg", "max_items": 1, "lease_ms": 1000,
                         "wait_ms": 0}, [("transaction", "producer-group", "pg")]),
    Op.ANSWER_UNCERTAIN: ({"producer_group": "pg", "tx_id": TX, "state": "rollback"},
                          [("transaction", "producer-group", "pg")]),
    Op.PULL: ({"topic": "t1", "queue_id": 0, "offset": 0, "max_messages": 1, "wait_ms": 0},
              [("consume", "topic", "t1")]),
    Op.COMMIT_OFFSET: ({"group": "g1", "topic": "t1", "queue_id": 0, "next_offset": 0},
                       [("commit-offsets", "group", "g1")]),
    Op.FETCH_OFFSET: ({"group": "g1", "topic": "t1", "queue_id": 0},
                      [("consume", "group", "g1")]),
    Op.GROUP_JOIN: ({"group": "g1", "member_id": None, "topics": ["t1"]},
                    [("consume", "group", "g1"), ("consume", "topic", "t1")]),
    Op.GROUP_HEARTBEAT: ({"group": "g1", "member_id": "m", "topics": ["t1"]},
                         [("consume", "group", "g1"), ("consume", "topic", "t1")]),
    Op.GROUP_SYNC: ({"group": "g1", "member_id": "m", "topics": ["t1"], "generation": 0},
                    [("consume", "group", "g1"), ("consume", "topic", "t1")]),
    Op.GROUP_LEAVE: ({"group": "g1", "member_id": "m"}, [("consume", "group", "g1")]),
    Op.GROUP_MEMBERS: ({"group": "g1"}, [("describe", "group", "g1")]),
    Op.SCOPE_DECISION: ({"producer_group": "pg", "scope": "S"}, [("admin", "cluster", "cluster")]),
    Op.QUERY_KEY: ({"topic": "t1", "key": "k", "limit": 1}, [("consume", "topic", "t1")]),
    Op.OFFSET_FOR_TIME: ({"topic": "t1", "queue_id": 0, "timestamp_ms": 0},
                         [("describe", "topic", "t1")]),
    Op.QUEUE_RANGE: ({"topic": "t1", "queue_id": 0}, [("describe", "topic", "t1")]),
    Op.STATS: ({}, [("admin", "cluster", "cluster")]),
    Op.LIST_TX: ({}, [("admin", "cluster", "cluster")]),
    Op.RESOLVE_TX: ({"producer_group": "pg", "tx_id": TX, "decision": "rollback"},
                    [("admin", "cluster", "cluster")]),
    Op.TOPICS: ({}, [("describe", "cluster", "cluster")]),
    Op.GROUPS: ({"group": None}, [("describe", "cluster", "cluster")]),
    Op.RESET_OFFSETS: ({"group": "g1", "topic": "t1", "queue_id": -1, "to": "earliest",
                        "value": -1, "force": True}, [("admin", "cluster", "cluster")]),
    Op.USER_PUT: (make_user_fields("temp", "temp password", True),
                  [("admin", "cluster", "cluster")]),
    Op.USER_REMOVE: ({"user": "nobody-here"}, [("admin", "cluster", "cluster")]),
    Op.USER_LIST: ({}, [("admin", "cluster", "cluster")]),
    Op.ACL_ADD: ({"principal": "x", "resource_type": "topic", "pattern": "y", "prefix": False,
                  "operation": "consume", "allow": True}, [("admin", "cluster", "cluster")]),
    Op.ACL_REMOVE: ({"principal": "x", "resource_type": "topic", "pattern": "zz",
                     "prefix": False, "operation": "consume", "allow": True},
                    [("admin", "cluster", "cluster")]),
    Op.ACL_LIST: ({}, [("admin", "cluster", "cluster")]),
    Op.SEND_AT: ({"message": MSG, "deliver_at": -1, "delay_ms": 60_000},
                 [("produce", "topic", "t1")]),
    Op.PULL_TAGGED: ({"topic": "t1", "queue_id": 0, "offset": 0, "max_messages": 1,
                      "wait_ms": 0, "tags": "a || b"}, [("consume", "topic", "t1")]),
    Op.NACK: ({"group": "g1", "topic": "t1", "queue_id": 0, "queue_offset": 0, "delay_ms": -1},
              [("consume", "group", "g1"), ("consume", "topic", "t1")]),
    Op.DLQ_REDRIVE: ({"group": "g1", "max_messages": 1}, [("admin", "cluster", "cluster")]),
    Op.REPL_FETCH: ({"follower": "127.0.0.1:1", "epoch": 0, "from_offset": 0,
                     "max_bytes": 4096, "wait_ms": 0}, [("admin", "cluster", "cluster")]),
    Op.REPL_STATUS: ({}, [("describe", "cluster", "cluster")]),
    Op.EPOCH_END: ({"epoch": 0}, [("admin", "cluster", "cluster")]),
    Op.PROMOTE: ({"node": ""}, [("admin", "cluster", "cluster")]),
    Op.TOPIC_CREATE: ({"settings": {"name": "t-new", "queues": 2, "retention_ms": -1,
                                    "retention_bytes": -1, "max_message_size": -1}},
                      [("alter", "topic", "t-new")]),
    Op.TOPIC_ALTER: ({"settings": {"name": "t-new", "queues": 3, "retention_ms": -1,
                                   "retention_bytes": -1, "max_message_size": -1}},
                     [("alter", "topic", "t-new")]),
    Op.TOPIC_DESCRIBE: ({"topic": "t1"}, [("describe", "topic", "t1")]),
    Op.TOPIC_DELETE: ({"topic": "t-doomed", "force": False}, [("alter", "topic", "t-doomed")]),
    Op.TOPIC_LIST: ({}, None),  # a log-in is enough: the answer is filtered (test_topic_access)
    Op.ROUTE: ({"topic": "t1"}, [("describe", "topic", "t1")]),
    Op.ROUTE_CHANGE: ({"json": '{"action": "drain", "topic": "t1", "group": "g9"}'},
                      [("alter", "topic", "t1")]),
}
#: Extra cases beyond one per operation: GROUPS of one group needs describe on that group.
EXTRA = [(Op.GROUPS, {"group": "g1"}, [("describe", "group", "g1")]),
         (Op.ROUTE, {"topic": ""}, [("describe", "cluster", "cluster")]),
         (Op.ROUTE_CHANGE, {"json": "not json"}, [("admin", "cluster", "cluster")])]


def test_every_operation_has_a_case_here_and_a_rule_in_the_server():
    assert set(CASES) == set(SCHEMA)
    assert set(OPERATIONS) == set(SCHEMA)
    assert {op for op, (_, needs) in CASES.items() if needs is None} == {
        op for op, declared in OPERATIONS.items() if declared.access.needs is None}


def rule_fields(user: str, need: tuple[str, str, str], allow: bool = True) -> dict:
    operation, rtype, name = need
    return {"principal": user, "resource_type": rtype, "pattern": name, "prefix": False,
            "operation": operation, "allow": allow}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("acl")
    data = str(base / "data")
    for user in ("admin", "granted", "nobody", "alice", "consumer", "producer"):
        add_user_offline(data, user)
    for kind in ("--topic", "--group", "--producer-group"):
        add_rule_offline(data, "--principal", "admin", "--operation", "all", kind, "",
                         "--prefix")
    add_rule_offline(data, "--principal", "admin", "--operation", "all", "--cluster")
    srv = ServerProcess(data, FAST, client_options={"user": "admin", "password": PASSWORD})
    srv.start()
    yield srv
    srv.kill()


def login(srv, user: str) -> Client:
    return Client(srv.address, user=user, password=PASSWORD, retries=0)


def open_tx(admin: Client, group: str = "pg") -> str:
    return admin.call(Op.PREPARE, {"producer_group": group, "tx_id": None,
                                   "messages": [MSG]})["tx_id"]


def fill(fields: dict, admin: Client) -> dict:
    return {k: (open_tx(admin) if v is TX else v) for k, v in fields.items()}


def outcome(client: Client, op: Op, fields: dict) -> FMQError | None:
    try:
        client.call(op, fields, timeout=30)
    except FMQError as exc:
        return exc
    return None


ALL_CASES = [(op, fields, needs) for op, (fields, needs) in CASES.items()] + EXTRA


def test_every_operation_is_refused_without_its_permission_and_allowed_with_it(server):
    checked = 0
    with login(server, "admin") as admin, login(server, "nobody") as nobody, \
            login(server, "granted") as granted:
        for op, fields, needs in ALL_CASES:
            if needs is None:  # open: passes authorisation for anyone logged in
                assert not isinstance(outcome(nobody, op, fill(fields, admin)),
                                      (AccessDenied, AuthenticationRequired)), op.name
                checked += 1
                continue
            refused = outcome(nobody, op, fill(fields, admin))
            assert isinstance(refused, AccessDenied), (op.name, refused)
            assert (refused.operation, refused.resource) in {
                (o, "the cluster" if t == "cluster" else f"{t} {n!r}") for o, t, n in needs}
            checked += 1
            rules = [rule_fields("granted", need) for need in needs]
            for rule in rules:
                admin.call(Op.ACL_ADD, rule)
            try:
                got = outcome(granted, op, fill(fields, admin))
                assert not isinstance(got, (AccessDenied, AuthenticationRequired)), \
                    (op.name, got)
                checked += 1
                for missing in rules if len(rules) > 1 else []:  # every need is needed
                    admin.call(Op.ACL_REMOVE, missing)
                    try:
                        assert isinstance(outcome(granted, op, fill(fields, admin)),
                                          AccessDenied), (op.name, missing)
                        checked += 1
                    finally:
                        admin.call(Op.ACL_ADD, missing)
            finally:
                for rule in rules:
                    admin.call(Op.ACL_REMOVE, rule)
        stats = broker_stats(admin)
    print(f"\n{checked} authorisation cases checked")
    assert checked >= 2 * len(SCHEMA)
    assert stats["server"]["access_denied"] >= len(SCHEMA) - 4
    assert "nobody denied produce on topic 't1' (SEND)" in server.log()


def test_prefix_rules_and_deny_over_allow(server):
    with login(server, "admin") as admin, login(server, "alice") as alice:
        allow_prefix = {"principal": "alice", "resource_type": "topic", "pattern": "orders.",
                        "prefix": True, "operation": "produce", "allow": True}
        deny_one = {**allow_prefix, "pattern": "orders.secret", "prefix": False, "allow": False}
        deny_everyone = {**allow_prefix, "principal": "*", "pattern": "orders.eu",
                         "allow": False}
        for rule in (allow_prefix, deny_one, deny_everyone):
            admin.call(Op.ACL_ADD, rule)

        def send(topic: str) -> FMQError | None:
            return outcome(alice, Op.SEND, {"message": {**MSG, "topic": topic}})

        assert send("orders.us") is None and send("orders.") is None
        assert isinstance(send("orders.secret"), AccessDenied)  # a literal deny wins
        assert send("orders.secret2") is None  # a literal matches only itself
        assert isinstance(send("orders.eu.1"), AccessDenied)  # '*' deny covers alice too
        assert isinstance(send("orders"), AccessDenied)  # outside the prefix
        assert isinstance(send("other"), AccessDenied)
        for rule in (allow_prefix, deny_one, deny_everyone):
            admin.call(Op.ACL_REMOVE, rule)
        assert isinstance(send("orders.us"), AccessDenied)  # removed: nothing allows it


def test_a_consumer_cannot_read_or_move_another_groups_offsets(server):
    with login(server, "admin") as admin, login(server, "consumer") as consumer:
        for operation in ("consume", "commit-offsets"):
            admin.call(Op.ACL_ADD, rule_fields("consumer", (operation, "group", "mine")))
        admin.call(Op.ACL_ADD, rule_fields("consumer", ("consume", "topic", "t1")))
        mine = {"group": "mine", "topic": "t1", "queue_id": 0}
        theirs = {**mine, "group": "theirs"}
        assert outcome(consumer, Op.COMMIT_OFFSET, {**mine, "next_offset": 0}) is None
        assert outcome(consumer, Op.FETCH_OFFSET, mine) is None
        for op, fields in ((Op.COMMIT_OFFSET, {**theirs, "next_offset": 0}),
                           (Op.FETCH_OFFSET, theirs),
                           (Op.GROUP_JOIN, {"group": "theirs", "member_id": None,
                                            "topics": ["t1"]}),
                           (Op.RESET_OFFSETS, {"group": "theirs", "topic": "t1",
                                               "queue_id": -1, "to": "latest", "value": -1,
                                               "force": True})):
            assert isinstance(outcome(consumer, op, fields), AccessDenied), op.name


def test_a_producer_cannot_end_or_answer_another_groups_transactions(server):
    with login(server, "admin") as admin, login(server, "producer") as producer:
        admin.call(Op.ACL_ADD, rule_fields("producer", ("transaction", "producer-group",
                                                        "mine")))
        admin.call(Op.ACL_ADD, rule_fields("producer", ("produce", "topic", "t1")))
        own = open_tx(admin, "mine")
        assert outcome(producer, Op.COMMIT, {"producer_group": "mine", "tx_id": own}) is None
        other = open_tx(admin, "other")
        named = {"producer_group": "other", "tx_id": other}
        for op, fields in ((Op.COMMIT, named), (Op.ROLLBACK, named),
                           (Op.ANSWER_UNCERTAIN, {**named, "state": "commit"}),
                           (Op.POLL_UNCERTAIN, {"producer_group": "other", "max_items": 1,
                                                "lease_ms": 1000, "wait_ms": 0}),
                           (Op.PREPARE, {"producer_group": "other", "tx_id": None,
                                         "messages": [MSG]}),
                           (Op.RESOLVE_TX, {**named, "decision": "commit"})):
            assert isinstance(outcome(producer, op, fields), AccessDenied), op.name
        txs = {t["tx_id"]: t for t in admin.call(Op.LIST_TX, {})["transactions"]}
        assert other in txs  # still open: nothing the producer sent touched it
