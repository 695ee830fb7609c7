"""Access rules cover topic administration (real users on a real server): create, alter
and delete need ``alter`` on the topic; describe follows from ``alter``, ``produce`` or
``consume``; ``fmq topic list`` shows only the topics the user may describe."""

from __future__ import annotations

import pytest

from fmq.client import Client
from fmq.errors import AccessDenied, AuthenticationRequired
from fmq.protocol import Op
from tests.security.conftest import PASSWORD, QUICK_SLOW_DOWN, add_rule_offline, add_user_offline
from tests.server.harness import ServerProcess, json_lines, run_cli

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def server(tmp_path):
    data = str(tmp_path / "data")
    for user in ("admin", "ops", "reader"):
        add_user_offline(data, user)
    for kind in ("--topic", "--group", "--producer-group"):
        add_rule_offline(data, "--principal", "admin", "--operation", "all", kind, "",
                         "--prefix")
    add_rule_offline(data, "--principal", "admin", "--operation", "all", "--cluster")
    # ops administers the team.* topics; reader reads team.orders only
    add_rule_offline(data, "--principal", "ops", "--operation", "alter", "--topic", "team.",
                     "--prefix")
    add_rule_offline(data, "--principal", "reader", "--operation", "consume", "--topic",
                     "team.orders")
    srv = ServerProcess(data, QUICK_SLOW_DOWN, client_options={"user": "admin",
                                                                "password": PASSWORD})
    srv.start()
    yield srv
    srv.kill()


def login(srv, user: str) -> Client:
    return Client(srv.address, user=user, password=PASSWORD, retries=0)


def test_topic_administration_follows_the_rules(server):
    with login(server, "admin") as admin, login(server, "ops") as ops, \
            login(server, "reader") as reader:
        admin.create_topic("secret", queues=1)
        ops.create_topic("team.orders", queues=2)
        ops.create_topic("team.audit")
        with pytest.raises(AccessDenied, match="alter on topic 'other'"):
            ops.create_topic("other")
        with pytest.raises(AccessDenied, match="alter on topic 'team.orders'"):
            reader.alter_topic("team.orders", queues=4)
        with pytest.raises(AccessDenied, match="alter on topic 'team.audit'"):
            reader.delete_topic("team.audit")
        assert ops.alter_topic("team.orders", queues=4)["queues"] == 4
        assert reader.describe_topic("team.orders")["queues"] == 4  # consume implies it
        assert ops.describe_topic("team.audit")["name"] == "team.audit"  # alter implies it
        with pytest.raises(AccessDenied, match="describe on topic 'secret'"):
            ops.describe_topic("secret")
        assert [t["name"] for t in admin.list_topics()] == ["secret", "team.audit",
                                                            "team.orders"]
        assert [t["name"] for t in ops.list_topics()] == ["team.audit", "team.orders"]
        assert [t["name"] for t in reader.list_topics()] == ["team.orders"]
        assert ops.delete_topic("team.audit")["state"] == "deleted"
    with Client(server.address, retries=0) as anonymous:
        with pytest.raises(AuthenticationRequired):
            anonymous.call(Op.TOPIC_LIST, {})
    env_cli = run_cli("topic", "list", "--json", "--server", server.address, "--user", "ops",
                      "--password-file", _password_file(server))
    assert env_cli.returncode == 0, env_cli.stderr
    assert [t["name"] for t in json_lines(env_cli.stdout)] == ["team.orders"]


def _password_file(server) -> str:
    import os

    path = os.path.join(os.path.dirname(server.data_dir), "password")
    with open(path, "w") as f:
        f.write(PASSWORD + "\n")
    return path
