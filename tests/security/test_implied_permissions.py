"""Permissions that follow from others (docs/security.md, *What each operation requires*):
describe of a topic from consume or produce on it, a consumer group's retry and
dead-letter topics from consume on the group; a deny rule still beats them, and a refusal
by a deny rule names the rule. The rule logic on its own, then through a real server."""

from __future__ import annotations

import pytest

from fmq.client import Client
from fmq.errors import AccessDenied, DeniedByRule
from fmq.protocol import Op
from fmq.security.acl import Operation, ResourceType, Rule, decide
from tests.server.harness import ServerProcess

from .conftest import FAST, PASSWORD, add_rule_offline, add_user_offline

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
C, D, P = Operation.CONSUME, Operation.DESCRIBE, Operation.PRODUCE

#: The rules docs/security.md gives the consuming application app2.
APP2 = [Rule.make("app2", "topic", "orders.", True, "consume", True),
        Rule.make("app2", "group", "billing", False, "consume", True),
        Rule.make("app2", "group", "billing", False, "commit-offsets", True)]


def test_a_groups_retry_and_dead_letter_topics_follow_from_the_group():
    for topic in ("%RETRY%billing", "%DLQ%billing"):
        assert decide(APP2, "app2", C, TOPIC, topic) == (True, None)
        assert decide(APP2, "app2", D, TOPIC, topic) == (True, None)
        assert decide(APP2, "app2", P, TOPIC, topic) == (False, None)
    assert decide(APP2, "app2", C, TOPIC, "%RETRY%shipping") == (False, None)
    assert decide(APP2, "app3", C, TOPIC, "%RETRY%billing") == (False, None)
    assert decide(APP2, "app2", C, TOPIC, "%RETRY%") == (False, None)


def test_describe_follows_from_consume_or_produce_on_the_topic():
    assert decide(APP2, "app2", D, TOPIC, "orders.a") == (True, None)
    assert decide(APP2, "app2", D, TOPIC, "payments") == (False, None)
    writer = [Rule.make("app1", "topic", "orders.", True, "produce", True)]
    assert decide(writer, "app1", D, TOPIC, "orders.a") == (True, None)
    assert decide(writer, "app1", C, TOPIC, "orders.a") == (False, None)  # not the reverse


def test_a_deny_beats_what_follows_and_is_named():
    deny_topic = Rule.make("app2", "topic", "%DLQ%billing", False, "consume", False)
    assert decide([*APP2, deny_topic], "app2", C, TOPIC, "%DLQ%billing") == (False,
                                                                           deny_topic)
    deny_group = Rule.make("*", "group", "billing", False, "consume", False)
    assert decide([*APP2, deny_group], "app2", C, TOPIC, "%RETRY%billing") == (False, None)
    deny_describe = Rule.make("app2", "topic", "orders.a", False, "describe", False)
    assert decide([*APP2, deny_describe], "app2", D, TOPIC, "orders.a") == (False,
                                                                           deny_describe)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = str(tmp_path_factory.mktemp("implied") / "data")
    for user in ("admin", "app2"):
        add_user_offline(data, user)
    add_rule_offline(data, "--principal", "admin", "--operation", "all", "--cluster")
    for kind in ("--topic", "--group"):
        add_rule_offline(data, "--principal", "admin", "--operation", "all", kind, "",
                         "--prefix")
    add_rule_offline(data, "--principal", "app2", "--operation", "consume", "--topic",
                     "orders.", "--prefix")
    add_rule_offline(data, "--principal", "app2", "--operation", "consume", "--group",
                     "billing")
    add_rule_offline(data, "--principal", "*", "--operation", "produce", "--topic",
                     "orders.secret", "--deny")
    srv = ServerProcess(data, FAST, client_options={"user": "admin", "password": PASSWORD})
    srv.start()
    yield srv
    srv.kill()


def test_the_server_lets_a_group_member_read_its_retry_topic(server):
    with Client(server.address, user="app2", password=PASSWORD, retries=0) as c:
        for topic in ("%RETRY%billing", "%DLQ%billing", "orders.a"):
            c.call(Op.QUEUE_RANGE, {"topic": topic, "queue_id": 0})
        c.call(Op.PULL, {"topic": "%RETRY%billing", "queue_id": 0, "offset": 0,
                         "max_messages": 1, "wait_ms": 0})
        with pytest.raises(AccessDenied) as caught:
            c.call(Op.PULL, {"topic": "%RETRY%shipping", "queue_id": 0, "offset": 0,
                             "max_messages": 1, "wait_ms": 0})
        assert type(caught.value) is AccessDenied and "fmq acl add" in str(caught.value)


def test_a_refusal_by_a_deny_rule_names_it(server):
    with Client(server.address, user="admin", password=PASSWORD, retries=0) as c:
        with pytest.raises(DeniedByRule) as caught:
            c.call(Op.SEND, {"message": {"topic": "orders.secret", "body": b"x", "key": None,
                                         "tags": None, "properties": {}, "queue_id": -1}})
    err = caught.value
    assert err.rule == "deny * produce on topic 'orders.secret'"
    assert "fmq acl remove" in str(err) and "fmq acl add" not in str(err)
