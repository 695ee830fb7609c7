"""SASL and TLS on the Kafka door: FMQ's users log in with SCRAM-SHA-256 or SCRAM-SHA-512
(PLAIN over TLS only; a user whose password was set before FMQ kept SHA-512 keys is told
the fix), FMQ's access rules decide each topic and group, Metadata lists only what a user may
describe, and nothing but ApiVersions and the handshake is answered before log-in. Real
server processes, real confluent-kafka and kcat clients, trustme certificates."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

import fmq
from fmq.client import TLSOptions
from fmq.security import Rule, UserStore, make_credential
from fmq.server.kafka.apis import API_TABLE
from fmq.server.kafka.listener import KafkaListener  # noqa: F401 - registers every API
from tests.security.conftest import PASSWORD, certs  # noqa: F401 - certs is a fixture
from tests.server.harness import closed_by_server

from .conftest import KafkaServer
from .wire import exchange, frame_request, request_type

pytestmark = pytest.mark.timeout(180)

#: (principal, resource type, name, operation): alice may produce to and consume "orders",
#: only describe "audit", and use the group "billing"; "secret" is nobody's but admin's.
RULES = [
    ("admin", "cluster", "cluster", "all"), ("admin", "topic", "", "all"),
    ("admin", "group", "", "all"),
    ("alice", "topic", "orders", "produce"), ("alice", "topic", "orders", "consume"),
    ("alice", "topic", "audit", "describe"),
    ("alice", "group", "billing", "consume"), ("alice", "group", "billing", "commit-offsets"),
    ("carol", "topic", "orders", "produce"),
]
FAST_LOGIN = {"server": {"auth_failure_delay_ms": 1, "auth_failure_max_delay_ms": 20}}


def secured_data(data_dir: str) -> str:
    """A stopped broker's directory with topics orders, audit, secret, users admin and
    alice (password PASSWORD) and RULES."""
    broker = fmq.Broker.open(data_dir)
    try:
        for topic in ("orders", "audit", "secret"):
            broker.topics.create(topic, 1)
    finally:
        broker.close()
    # Written as `fmq user add` and `fmq acl add` write them, without a process each.
    store = UserStore(data_dir)
    for user in ("admin", "alice"):
        store.put_user(user, make_credential(PASSWORD), create=True)
    # carol's password was set before FMQ kept SCRAM-SHA-512 keys: SHA-256 keys only.
    store.put_user("carol", dataclasses.replace(make_credential(PASSWORD), sha512=None),
                   create=True)
    for principal, rtype, name, operation in RULES:
        store.add_rule(Rule.make(principal, rtype, name, name == "", operation,
                                 True))
    return data_dir


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    data = secured_data(str(tmp_path_factory.mktemp("ksec") / "data"))
    srv = KafkaServer(data, FAST_LOGIN, {"user": "admin", "password": PASSWORD})
    srv.start()
    yield srv
    srv.kill()


def sasl(srv: KafkaServer, user: str = "alice", password: str = PASSWORD,
         mechanism: str = "SCRAM-SHA-256", protocol: str = "SASL_PLAINTEXT", **extra) -> dict:
    return {"bootstrap.servers": srv.bootstrap, "security.protocol": protocol,
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            **extra}


def produce(config: dict, topic: str, values: list[bytes]) -> tuple[list[int], list]:
    """(offsets delivered, errors) of producing ``values`` to partition 0 of ``topic``."""
    producer = Producer({**config, "acks": "all", "message.timeout.ms": 20_000})
    offsets, errors = [], []

    def delivered(err, msg) -> None:
        (errors.append(err) if err is not None else offsets.append(msg.offset()))

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0, "messages left undelivered"
    return offsets, errors


def consume(config: dict, topic: str, count: int, group: str = "billing") -> list:
    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, errors = [], []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and not errors and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            (errors if message.error() else got).append(message)
    finally:
        consumer.close()
    return got if not errors else [errors[0].error()]


def errors_seen(config: dict, want: int, limit: float = 20) -> list[KafkaError]:
    """The client errors (error_cb) of a producer that only asks for metadata."""
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and not any(e.code() == want for e in errors):
        try:
            producer.list_topics(timeout=1)
        except KafkaException as exc:
            errors.append(exc.args[0])
        producer.poll(0.1)
    return errors


def test_every_kafka_api_declares_its_access():
    undeclared = [api.name for api in API_TABLE.values() if api.access is None]
    assert not undeclared, f"Kafka APIs with no access declaration: {undeclared}"
    assert {17, 36} <= API_TABLE.keys()


def test_scram_sha_256_produces_and_consumes_as_a_user_with_the_rules(secured):
    offsets, errors = produce(sasl(secured), "orders", [b"m0", b"m1", b"m2"])
    assert not errors and len(offsets) == 3
    got = consume(sasl(secured), "orders", 3)
    assert [m.value() for m in got][-3:] == [b"m0", b"m1", b"m2"]
    assert "logged in as 'alice' with SCRAM-SHA-256" in secured.log()


def test_a_wrong_password_fails_with_the_clients_authentication_error(secured):
    errors = errors_seen(sasl(secured, password="wrong password"),
                         KafkaError._AUTHENTICATION)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert "authentication failed" in secured.log()
    assert "wrong password" not in secured.log()  # the password is never logged


def test_an_unknown_user_fails_as_a_wrong_password_does(secured):
    errors = errors_seen(sasl(secured, user="mallory"), KafkaError._AUTHENTICATION)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_a_denied_topic_is_topic_authorization_failed(secured):
    _, errors = produce(sasl(secured), "secret", [b"no"])
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # audit: alice may describe it but not read it.
    got = consume(sasl(secured), "audit", 1)
    assert [e.code() for e in got] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert "alice denied consume on topic 'audit' (Kafka Fetch)" in secured.log()


def test_a_denied_group_is_group_authorization_failed(secured):
    consumer = Consumer({**sasl(secured), "group.id": "payroll", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("orders", 0, 0)])
        with pytest.raises(KafkaException) as raised:
            consumer.commit(offsets=[TopicPartition("orders", 0, 1)], asynchronous=False)
        assert raised.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    # subscribe(): JoinGroup is refused too.
    consumer = Consumer({**sasl(secured), "group.id": "payroll"})
    codes = []
    try:
        consumer.subscribe(["orders"])
        deadline = time.monotonic() + 30
        while not codes and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error():
                codes.append(message.error().code())
    finally:
        consumer.close()
    assert codes == [KafkaError.GROUP_AUTHORIZATION_FAILED]


def test_the_allowed_group_commits(secured):
    produce(sasl(secured), "orders", [b"c"])
    consumer = Consumer({**sasl(secured), "group.id": "billing", "enable.auto.commit": False})
    try:
        done = consumer.commit(offsets=[TopicPartition("orders", 0, 1)], asynchronous=False)
        assert [tp.error for tp in done] == [None]
        assert consumer.committed([TopicPartition("orders", 0)], timeout=10)[0].offset == 1
    finally:
        consumer.close()


def test_metadata_lists_only_the_topics_the_user_may_describe(secured):
    alice = Producer(sasl(secured)).list_topics(timeout=10)
    assert set(alice.topics) == {"orders", "audit"}
    admin = Producer(sasl(secured, user="admin")).list_topics(timeout=10)
    assert {"orders", "audit", "secret"} <= set(admin.topics)
    named = Producer(sasl(secured)).list_topics("secret", timeout=10)
    assert named.topics["secret"].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_before_log_in_only_api_versions_and_the_handshake_are_answered(secured):
    address = ("127.0.0.1", secured.kafka_port)
    assert exchange(address, request_type(18, 0)())[1].error_code == 0
    _, handshake = exchange(address, request_type(17, 1)(mechanism="OAUTHBEARER"))
    assert handshake.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
    assert list(handshake.mechanisms) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(frame_request(request_type(3, 12)(
            topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)))
        assert closed_by_server(sock, 10)
    assert "Metadata before log-in" in secured.log()


def test_a_plaintext_client_on_a_server_with_users_gets_nothing(secured):
    plain = Producer({"bootstrap.servers": secured.bootstrap})
    with pytest.raises(KafkaException):
        plain.list_topics(timeout=3)


def test_plain_without_tls_is_refused(secured):
    errors = errors_seen(sasl(secured, mechanism="PLAIN"), KafkaError._AUTHENTICATION)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert "PLAIN sends the password itself" in secured.log()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kcat_logs_in_with_scram(secured, mechanism):
    options = ["-X", "security.protocol=SASL_PLAINTEXT", "-X",
               f"sasl.mechanisms={mechanism}", "-X", "sasl.username=alice", "-X",
               f"sasl.password={PASSWORD}"]
    produced = subprocess.run(["kcat", "-b", secured.bootstrap, *options, "-P", "-t",
                               "orders", "-p", "0"], input="from-kcat\n", text=True,
                              capture_output=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    listed = subprocess.run(["kcat", "-b", secured.bootstrap, *options, "-L", "-J"],
                            text=True, capture_output=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert '"topic":"orders"' in listed.stdout and '"topic":"secret"' not in listed.stdout
    read = subprocess.run(["kcat", "-b", secured.bootstrap, *options, "-C", "-t", "orders",
                           "-p", "0", "-o", "-1", "-e", "-f", "%s\n"],
                          text=True, capture_output=True, timeout=60)
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip().splitlines()[-1] == "from-kcat"
    wrong = subprocess.run(["kcat", "-b", secured.bootstrap, *options[:-1],
                            "sasl.password=wrong", "-L", "-m", "5"],
                           text=True, capture_output=True, timeout=60)
    assert wrong.returncode != 0


def test_sasl_ssl_with_plain_over_the_servers_certificate(tmp_path, certs):  # noqa: F811
    data = secured_data(str(tmp_path / "data"))
    config = {**FAST_LOGIN, "server": {**FAST_LOGIN["server"],
                                       "tls_cert_file": certs.server_cert}}
    srv = KafkaServer(data, config, {"user": "admin", "password": PASSWORD,
                                     "tls": TLSOptions(ca_file=certs.ca)})
    srv.start()
    try:
        tls = {"ssl.ca.location": certs.ca}
        plain = sasl(srv, mechanism="PLAIN", protocol="SASL_SSL", **tls)
        offsets, errors = produce(plain, "orders", [b"over-tls"])
        assert not errors and offsets == [0]
        scram = sasl(srv, protocol="SASL_SSL", **tls)
        assert [m.value() for m in consume(scram, "orders", 1)] == [b"over-tls"]
        wrong = sasl(srv, mechanism="PLAIN", protocol="SASL_SSL", password="nope", **tls)
        assert any(e.code() == KafkaError._AUTHENTICATION
                   for e in errors_seen(wrong, KafkaError._AUTHENTICATION))
        # A plaintext Kafka client does not get through the TLS port.
        cleartext = Producer(sasl(srv))
        with pytest.raises(KafkaException):
            cleartext.list_topics(timeout=3)
        log = srv.log()
        assert "logged in as 'alice' with PLAIN" in log and "(TLS," in log
        assert "Traceback" not in log
    finally:
        srv.kill()
    assert Path(data).exists()


def test_mutual_tls_requires_a_client_certificate_on_the_kafka_port(tmp_path, certs):  # noqa: F811
    config = {"server": {"tls_cert_file": certs.server_cert, "tls_client_ca_file": certs.ca}}
    srv = KafkaServer(str(tmp_path / "data"), config, {"tls": TLSOptions(
        ca_file=certs.ca, cert_file=certs.client_cert, key_file=certs.client_cert)})
    srv.start()
    try:
        anonymous = Producer({"bootstrap.servers": srv.bootstrap, "security.protocol": "SSL",
                              "ssl.ca.location": certs.ca})
        with pytest.raises(KafkaException):
            anonymous.list_topics(timeout=3)
        shown = Producer({"bootstrap.servers": srv.bootstrap, "security.protocol": "SSL",
                          "ssl.ca.location": certs.ca,
                          "ssl.certificate.location": certs.client_cert,
                          "ssl.key.location": certs.client_cert})
        assert shown.list_topics(timeout=10).brokers
        assert "requires a client certificate" in srv.log()
    finally:
        srv.kill()


def test_confluent_kafka_logs_in_with_scram_sha_512(secured):
    offsets, errors = produce(sasl(secured, mechanism="SCRAM-SHA-512"), "orders", [b"sha512"])
    assert not errors and len(offsets) == 1
    wrong = errors_seen(sasl(secured, mechanism="SCRAM-SHA-512", password="wrong"),
                        KafkaError._AUTHENTICATION)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in wrong), wrong


def test_a_user_without_sha_512_keys_is_told_the_fix(secured):
    """carol's credential predates SHA-512 keys: SCRAM-SHA-512 fails with a message naming
    the fix (the same words any failed SHA-512 log-in gets, so they tell a guesser
    nothing), the log names carol, and SCRAM-SHA-256 still works for her."""
    errors = errors_seen(sasl(secured, user="carol", mechanism="SCRAM-SHA-512"),
                         KafkaError._AUTHENTICATION)
    assert any("fmq user passwd" in e.str() for e in errors), errors
    assert "user 'carol' has no SCRAM-SHA-512 keys" in secured.log()
    offsets, errors = produce(sasl(secured, user="carol"), "orders", [b"sha256"])
    assert not errors and len(offsets) == 1


def test_a_password_set_over_the_network_gets_sha_512_keys(secured):
    """USER_PUT from this release's client carries SHA-512 keys (trailing fields); one from
    an older client (without them) gives a user who logs in with SHA-256 only."""
    from fmq.client import Client
    from fmq.client.auth import make_user_fields
    from fmq.protocol import Op

    with Client(secured.address, user="admin", password=PASSWORD) as admin:
        admin.call(Op.USER_PUT, make_user_fields("dave", "dave's password", True))
        older = make_user_fields("erin", "erin's password", True)
        del older["sha512"]
        admin.call(Op.USER_PUT, older)
    listed = Producer(sasl(secured, user="dave", password="dave's password",
                           mechanism="SCRAM-SHA-512")).list_topics(timeout=10)
    assert listed.brokers
    errors = errors_seen(sasl(secured, user="erin", password="erin's password",
                              mechanism="SCRAM-SHA-512"), KafkaError._AUTHENTICATION)
    assert any("fmq user passwd" in e.str() for e in errors), errors
    assert Producer(sasl(secured, user="erin", password="erin's password")).list_topics(
        timeout=10).brokers
