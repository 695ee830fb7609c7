"""The one schema table: every opcode with its request and response fields.

There is one table for all operations, not a class per message or per version. A new
protocol version changes this table (and ``PROTOCOL_VERSION``); docs/protocol.md lists the
same table for implementers in other languages.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from fmq.protocol.structs import Struct, Trailing
from fmq.protocol.types import (
    BOOL,
    BYTES,
    I32,
    I64,
    OPT_STR,
    PROPS,
    STR,
    TEXT,
    U8,
    U16,
    U32,
    U64,
    FieldType,
    ListOf,
)


class Op(IntEnum):
    PING = 1
    SEND = 2
    SEND_BATCH = 3
    PREPARE = 4
    COMMIT = 5
    ROLLBACK = 6
    POLL_UNCERTAIN = 7
    ANSWER_UNCERTAIN = 8
    PULL = 9
    COMMIT_OFFSET = 10
    FETCH_OFFSET = 11
    GROUP_JOIN = 12
    GROUP_HEARTBEAT = 13
    GROUP_LEAVE = 14
    QUERY_KEY = 15
    OFFSET_FOR_TIME = 16
    QUEUE_RANGE = 17
    STATS = 18
    LIST_TX = 19
    RESOLVE_TX = 20
    TOPICS = 21
    GROUPS = 22
    RESET_OFFSETS = 23
    REPL_FETCH = 40
    REPL_STATUS = 41
    EPOCH_END = 42
    PROMOTE = 43
    SEND_AT = 55
    NACK = 56
    DLQ_REDRIVE = 57
    PULL_TAGGED = 50
    # security (docs/security.md)
    HELLO = 30
    AUTH_START = 31
    AUTH_FINISH = 32
    USER_PUT = 33
    USER_REMOVE = 34
    USER_LIST = 35
    ACL_ADD = 36
    ACL_REMOVE = 37
    ACL_LIST = 38
    # topic administration (docs/operations.md, "Topics")
    TOPIC_CREATE = 60
    TOPIC_ALTER = 61
    TOPIC_DESCRIBE = 62
    TOPIC_DELETE = 63
    TOPIC_LIST = 64
    # clusters of broker groups (docs/cluster.md)
    ROUTE = 65
    ROUTE_CHANGE = 66
    # consumer groups (docs/cluster.md, "One reader per queue")
    GROUP_SYNC = 67
    # the one-protocol rule of consumer groups across broker groups (docs/kafka.md)
    GROUP_MEMBERS = 68
    # a scope's decision over several broker groups (docs/transactions.md, *Scopes*)
    SCOPE_DECISION = 69


# ------------------------------------------------------------------ composite types

#: A message to store. queue_id -1 = let the broker pick (key hash or round robin).
MESSAGE = Struct("message", [
    ("topic", STR), ("body", BYTES), ("key", OPT_STR), ("tags", OPT_STR),
    ("properties", PROPS), ("queue_id", I32),
])
SEND_RESULT = Struct("send_result", [("offset", U64), ("queue_id", U32), ("queue_offset", U64)])
STORED_MESSAGE = Struct("stored_message", [
    ("topic", STR), ("queue_id", U32), ("queue_offset", U64), ("offset", U64),
    ("body", BYTES), ("key", OPT_STR), ("tags", OPT_STR), ("properties", PROPS),
    ("store_time", I64),
])
UNCERTAIN_MESSAGE = Struct("uncertain_message", [
    ("topic", STR), ("queue_id", U32), ("key", OPT_STR), ("tags", OPT_STR),
    ("properties", PROPS), ("body", BYTES), ("offset", U64),
])
UNCERTAIN_TX = Struct("uncertain_tx", [
    ("tx_id", STR), ("producer_group", STR), ("prepare_offset", U64), ("store_time", I64),
    ("checks", U32), ("messages", ListOf(UNCERTAIN_MESSAGE)),
])
TX_INFO = Struct("tx_info", [
    ("tx_id", STR), ("producer_group", STR), ("state", STR), ("age_ms", U64),
    ("checks", U32), ("messages", U32), ("prepare_offset", U64),
])
#: HELLO's trailing fields, sent only to a client whose HELLO names protocol_version 2 or
#: more (an older client reads the payload exactly and would refuse them): "primary" or
#: "follower", and the primary's address as this node knows it ("" on the primary itself,
#: and while it is unknown).
HELLO_NODE = Trailing("hello_node", [("role", STR), ("primary", STR)])
HELLO_NODE_VERSION = 2
#: REPL_FETCH's trailing fields: a follower that reads the high watermark asks for it
#: (``visible_end`` true), and only then does the answer carry the primary's visible end
#: (an older peer reads the payload exactly and would refuse the extra bytes).
REPL_ASK = Trailing("repl_ask", [("visible_end", BOOL)])
REPL_VISIBLE = Trailing("repl_visible", [("visible_end", U64)])
#: RESET_OFFSETS's trailing field: ``execute`` false asks for the plan only (each queue's
#: old and new offset, nothing changed). A client that leaves it out (older ones) gets the
#: offsets moved, as before.
RESET_MODE = Trailing("reset_mode", [("execute", BOOL)])
#: USER_PUT's SCRAM-SHA-512 keys (docs/kafka.md): left out by an older client.
SCRAM_SHA512 = Trailing("scram_sha512", [("salt", BYTES), ("iterations", U32),
                                         ("stored_key", BYTES), ("server_key", BYTES)])
#: A topic's settings in TOPIC_CREATE and TOPIC_ALTER (fmq.topic_config.TopicConfig): -1 =
#: not given (create: the default; alter: unchanged); 0 in the last three = back to the
#: broker's setting (alter). Settings added later (a route) follow as trailing fields.
TOPIC_SETTINGS = Struct("topic_settings", [
    ("name", STR), ("queues", I32), ("retention_ms", I64), ("retention_bytes", I64),
    ("max_message_size", I64),
])
QUEUE_REF = Struct("queue_ref", [("topic", STR), ("queue_id", U32)])
ERROR = [("code", U16), ("retriable", BOOL), ("message", TEXT)]
ACL_RULE = [("principal", STR), ("resource_type", STR), ("pattern", OPT_STR),
            ("prefix", BOOL), ("operation", STR), ("allow", BOOL)]


@dataclass(frozen=True)
class OpSpec:
    op: Op
    request: list[tuple[str, FieldType]]
    response: list[tuple[str, FieldType]]
    doc: str


def _spec(op: Op, request: list, response: list, doc: str) -> OpSpec:
    return OpSpec(op, request, response, doc)


SCHEMA: dict[int, OpSpec] = {s.op: s for s in [
    _spec(Op.PING, [], [
        ("server_version", STR), ("protocol_version", U8), ("queues_per_topic", U16),
        ("max_frame_size", U32), ("max_in_flight", U32)],
        "Liveness and server limits."),
    _spec(Op.SEND, [("message", MESSAGE)], [("result", SEND_RESULT)],
          "Store one message; answered once it is durable."),
    _spec(Op.SEND_BATCH, [("messages", ListOf(MESSAGE))], [("results", ListOf(SEND_RESULT))],
          "Store several messages in one group commit: all or none."),
    _spec(Op.PREPARE, [("producer_group", STR), ("tx_id", OPT_STR),
                       ("messages", ListOf(MESSAGE))],
          [("tx_id", STR)],
          "Store a prepared (invisible) transaction; tx_id null = the server makes one."),
    _spec(Op.COMMIT, [("producer_group", STR), ("tx_id", STR)], [("state", STR)],
          "Commit a prepared transaction of the group (idempotent)."),
    _spec(Op.ROLLBACK, [("producer_group", STR), ("tx_id", STR)], [("state", STR)],
          "Roll back a prepared transaction of the group (idempotent)."),
    _spec(Op.POLL_UNCERTAIN, [("producer_group", STR), ("max_items", U16), ("lease_ms", U32),
                              ("wait_ms", U32)],
          [("transactions", ListOf(UNCERTAIN_TX))],
          "Feedback long poll: open transactions of the group due for a check."),
    _spec(Op.ANSWER_UNCERTAIN, [("producer_group", STR), ("tx_id", STR), ("state", STR)],
          [("state", STR)],
          "Answer a feedback offer with commit, rollback or unknown."),
    _spec(Op.PULL, [("topic", STR), ("queue_id", U32), ("offset", U64), ("max_messages", U32),
                    ("wait_ms", U32)],
          [("messages", ListOf(STORED_MESSAGE)), ("min_offset", U64), ("next_offset", U64)],
          "Read a queue from an offset; long-polls up to wait_ms when nothing is there."),
    _spec(Op.PULL_TAGGED, [("topic", STR), ("queue_id", U32), ("offset", U64),
                           ("max_messages", U32), ("wait_ms", U32), ("tags", STR)],
          [("messages", ListOf(STORED_MESSAGE)), ("min_offset", U64), ("next_offset", U64),
           ("resume_offset", U64)],
          "PULL of the messages a tag expression selects; resume_offset: where to go on."),
    _spec(Op.COMMIT_OFFSET, [("group", STR), ("topic", STR), ("queue_id", U32),
                             ("next_offset", U64)], [],
          "Record a consumer group's progress in a queue."),
    _spec(Op.FETCH_OFFSET, [("group", STR), ("topic", STR), ("queue_id", U32)],
          [("offset", I64)],
          "A consumer group's committed offset in a queue; -1 = none."),
    _spec(Op.GROUP_JOIN, [("group", STR), ("member_id", OPT_STR), ("topics", ListOf(STR))],
          [("member_id", STR), ("generation", U64), ("assignment", ListOf(QUEUE_REF)),
           ("queues_per_topic", U16), ("heartbeat_interval_ms", U32),
           ("session_timeout_ms", U32)],
          "Join a consumer group; the answer carries this member's queues."),
    _spec(Op.GROUP_HEARTBEAT, [("group", STR), ("member_id", STR), ("topics", ListOf(STR))],
          [("generation", U64), ("assignment", ListOf(QUEUE_REF))],
          "Keep membership alive (re-joins an expired member); returns the current queues."),
    _spec(Op.GROUP_SYNC, [("group", STR), ("member_id", STR), ("topics", ListOf(STR)),
                          ("generation", U64)],
          [("generation", U64), ("assignment", ListOf(QUEUE_REF))],
          "GROUP_HEARTBEAT saying the generation whose assignment the member reads now: "
          "queues that assignment left out are released to their next owner."),
    _spec(Op.GROUP_LEAVE, [("group", STR), ("member_id", STR)], [],
          "Leave a consumer group; its queues go to the other members."),
    _spec(Op.GROUP_MEMBERS, [("group", STR)], [("fmq_members", U32), ("kafka_members", U32)],
          "The live members a consumer group has on this primary, per protocol (FMQ's "
          "consumers, the Kafka door's members), those being admitted counted: asked by "
          "another broker group before it lets the other protocol start the group."),
    _spec(Op.SCOPE_DECISION, [("producer_group", STR), ("scope", STR)], [("json", TEXT)],
          "Whether this primary holds a durable end mark of the producer group's scope, and "
          "the decision it carries while open, as JSON: asked by another broker group that "
          "finds the scope's transactions open with no mark of its own."),
    _spec(Op.QUERY_KEY, [("topic", STR), ("key", STR), ("limit", U32)],
          [("messages", ListOf(STORED_MESSAGE))],
          "Messages of a topic with a key."),
    _spec(Op.OFFSET_FOR_TIME, [("topic", STR), ("queue_id", U32), ("timestamp_ms", U64)],
          [("offset", U64)],
          "First queue offset stored at or after a time."),
    _spec(Op.QUEUE_RANGE, [("topic", STR), ("queue_id", U32)],
          [("min_offset", U64), ("next_offset", U64)],
          "Consumable range of a queue."),
    _spec(Op.STATS, [], [("json", TEXT)], "Broker and server statistics as a JSON object."),
    _spec(Op.LIST_TX, [], [("transactions", ListOf(TX_INFO))],
          "Open transactions, oldest first."),
    _spec(Op.RESOLVE_TX, [("producer_group", STR), ("tx_id", STR), ("decision", STR)],
          [("state", STR)],
          "An operator ends an open transaction of the group: decision commit or rollback."),
    _spec(Op.TOPICS, [], [("json", TEXT)],
          "Every topic (queues, messages, bytes, store times) and disk usage, as JSON."),
    _spec(Op.GROUPS, [("group", OPT_STR)], [("json", TEXT)],
          "Consumer groups (members, committed offsets, lag), or one group, as JSON."),
    _spec(Op.RESET_OFFSETS, [("group", STR), ("topic", OPT_STR), ("queue_id", I32),
                             ("to", STR), ("value", I64), ("force", BOOL),
                             ("mode", RESET_MODE)], [("json", TEXT)],
          "An operator moves a group's committed offsets, or with mode.execute false only "
          "plans the move; refused while the group has members unless force."),
    _spec(Op.REPL_FETCH, [("follower", STR), ("epoch", U64), ("from_offset", U64),
                          ("max_bytes", U32), ("wait_ms", U32), ("ask", REPL_ASK)],
          [("epoch", U64), ("segment_base", U64), ("segment_size", U64), ("data", BYTES),
           ("durable_end", U64), ("first_offset", U64), ("visible", REPL_VISIBLE)],
          "A follower's fetch: reports that it holds the log durably below from_offset and "
          "asks for the whole records from there (docs/replication.md)."),
    _spec(Op.EPOCH_END, [("epoch", U64)],
          [("epoch", U64), ("end_offset", U64), ("current_epoch", U64)],
          "Where epoch ends in the primary's log: the largest epoch it knows at or below the "
          "one asked, and the offset that epoch ends at (docs/replication.md)."),
    _spec(Op.PROMOTE, [("node", STR)], [("json", TEXT)],
          "Make this follower the primary now: a new epoch, the EPOCH record, then it serves."),
    _spec(Op.REPL_STATUS, [], [("json", TEXT)],
          "The server's role, its followers' durable offsets, lag and the in-sync set."),
    _spec(Op.SEND_AT, [("message", MESSAGE), ("deliver_at", I64), ("delay_ms", I64)],
          [("offset", U64), ("deliver_at", I64)],
          "Store one message now, consumable at deliver_at (ms since the epoch) or after "
          "delay_ms (the other one -1)."),
    _spec(Op.NACK, [("group", STR), ("topic", STR), ("queue_id", U32), ("queue_offset", U64),
                    ("delay_ms", I64)], [("reconsume_times", U32), ("dead_letter", BOOL)],
          "A group failed a message: redeliver it to the group after delay_ms (-1: the "
          "back-off level), or dead-letter it."),
    _spec(Op.DLQ_REDRIVE, [("group", STR), ("max_messages", U32)], [("redriven", U32)],
          "Send a group's dead letters back to its retry topic."),
    _spec(Op.HELLO, [("protocol_version", U8), ("client", STR)],
          [("protocol_version", U8), ("server_version", STR), ("auth_required", BOOL),
           ("mechanisms", ListOf(STR)), ("node", HELLO_NODE)],
          "The handshake: the highest version each side speaks, whether the client must "
          "authenticate (and how) before anything else, and (to a client whose HELLO names "
          "version 2 or more) this node's role and its primary."),
    _spec(Op.AUTH_START, [("mechanism", STR), ("message", TEXT)], [("message", TEXT)],
          "SCRAM client-first message in, server-first message out."),
    _spec(Op.AUTH_FINISH, [("message", TEXT)], [("message", TEXT), ("principal", STR)],
          "SCRAM client-final message in, server-final message out: the session is "
          "authenticated as principal."),
    _spec(Op.USER_PUT, [("user", STR), ("create", BOOL), ("salt", BYTES), ("iterations", U32),
                        ("stored_key", BYTES), ("server_key", BYTES), ("sha512", SCRAM_SHA512)],
          [],
          "Add a user (create) or change its password: a SCRAM-SHA-256 credential made by "
          "the client, and (trailing, optional) its SCRAM-SHA-512 keys for Kafka clients; "
          "the password never travels."),
    _spec(Op.USER_REMOVE, [("user", STR)], [], "Remove a user."),
    _spec(Op.USER_LIST, [], [("users", ListOf(STR))], "The users' names."),
    _spec(Op.ACL_ADD, ACL_RULE, [("added", BOOL)],
          "Add an access rule (added false: it was there already)."),
    _spec(Op.ACL_REMOVE, ACL_RULE, [], "Remove an access rule."),
    _spec(Op.ACL_LIST, [], [("json", TEXT)], "The access rules, as JSON."),
    _spec(Op.TOPIC_CREATE, [("settings", TOPIC_SETTINGS)], [("json", TEXT)],
          "Create a topic with its own settings; answers its configuration as JSON."),
    _spec(Op.TOPIC_ALTER, [("settings", TOPIC_SETTINGS)], [("json", TEXT)],
          "Change a topic's settings (queues only grow); answers its configuration."),
    _spec(Op.TOPIC_DESCRIBE, [("topic", STR)], [("json", TEXT)],
          "A topic's settings, the ones in force and each queue's range, as JSON."),
    _spec(Op.TOPIC_DELETE, [("topic", STR), ("force", BOOL)], [("json", TEXT)],
          "Delete a topic (its messages become unreadable); refused while consumer groups "
          "have lag on it unless force."),
    _spec(Op.TOPIC_LIST, [], [("json", TEXT)],
          "The topics the user may describe, with their settings, as JSON (no index walk)."),
    _spec(Op.ROUTE, [("topic", STR)], [("json", TEXT)],
          "A topic's route (its broker groups, queues and each group's primary) with its "
          "version, as JSON; topic \"\" answers every route and group of the cluster."),
    _spec(Op.ROUTE_CHANGE, [("json", TEXT)], [("json", TEXT)],
          "Create or change a topic's route in the cluster's etcd on the client's behalf "
          "(create, expand, drain, reopen, remove-group); answers the new route as JSON."),
]}
