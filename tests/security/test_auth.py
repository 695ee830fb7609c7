"""SCRAM-SHA-256 authentication against a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import threading

import pytest
from scramp import ScramClient

import fmq
from fmq.client import Client, Connection, Producer
from fmq.client.aio import AsyncProducer
from fmq.errors import AuthenticationFailed, AuthenticationRequired, FMQError
from fmq.protocol import Op, encode_request
from tests.server.harness import run_cli

from .conftest import PASSWORD

pytestmark = pytest.mark.timeout(180)


def address(srv) -> tuple[str, int]:
    return ("127.0.0.1", srv.port)


def test_the_right_password_logs_in(auth_server):
    with Producer(auth_server.address, user="alice", password=PASSWORD) as producer:
        assert producer.send("t", b"x").queue_offset == 0
        assert producer.principal == "alice"


def test_the_asyncio_producer_logs_in(auth_server):
    async def run() -> int:
        async with AsyncProducer(auth_server.address, user="alice",
                                 password=PASSWORD) as producer:
            return (await producer.send("a", b"x")).queue_offset

    assert asyncio.run(run()) == 0


def test_credentials_come_from_the_environment_or_a_file(auth_server, tmp_path, monkeypatch):
    monkeypatch.setenv("FMQ_USER", "alice")
    monkeypatch.setenv("FMQ_PASSWORD", PASSWORD)
    with Client(auth_server.address) as client:
        assert client.call(Op.QUEUE_RANGE, {"topic": "t", "queue_id": 0})["next_offset"] == 0
    monkeypatch.delenv("FMQ_PASSWORD")
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    with Client(auth_server.address, password_file=str(secret)) as client:
        client.call(Op.QUEUE_RANGE, {"topic": "t", "queue_id": 0})
    monkeypatch.setenv("FMQ_PASSWORD_FILE", str(secret))
    out = run_cli("produce", "--server", auth_server.address, "--topic", "t", "--body", "x")
    assert out.returncode == 0, out.stderr


def test_without_a_log_in_only_the_handshake_and_ping_pass(auth_server):
    with Client(auth_server.address) as client:
        assert client.ping()["protocol_version"] == 1
        hello = client.call(Op.HELLO, {"protocol_version": 9, "client": "test"})
        assert hello["auth_required"] and hello["mechanisms"] == ["SCRAM-SHA-256"]
        assert hello["protocol_version"] == 1  # the server answers the version both speak
        for op, fields in ((Op.SEND, {"message": {"topic": "t", "body": b"x", "key": None,
                                                  "tags": None, "properties": {},
                                                  "queue_id": -1}}),
                           (Op.STATS, {}), (Op.USER_LIST, {})):
            with pytest.raises(AuthenticationRequired, match="requires authentication"):
                client.call(op, fields)
    out = run_cli("stats", "--server", auth_server.address)
    assert out.returncode == 1 and "requires authentication" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", PASSWORD)])
def test_a_wrong_password_and_an_unknown_user_are_refused_alike(auth_server, user, password):
    with pytest.raises(AuthenticationFailed) as refused, \
            Client(auth_server.address, user=user, password=password) as client:
        client.ping()
    assert "wrong user name or password" in str(refused.value)
    assert auth_server.alive


def scram_request(conn: Connection, op: Op, message: str, mechanism: str = "SCRAM-SHA-256"):
    fields = {"message": message} if op == Op.AUTH_FINISH else {"mechanism": mechanism,
                                                                "message": message}
    return conn.request(op, fields, 30)


def test_replayed_and_truncated_scram_messages_are_refused(auth_server):
    addr = address(auth_server)
    # One good exchange, recorded.
    conn = Connection(addr)
    scram = ScramClient(["SCRAM-SHA-256"], "alice", PASSWORD)
    first = scram.get_client_first()
    scram.set_server_first(scram_request(conn, Op.AUTH_START, first)["message"])
    final = scram.get_client_final()
    assert scram_request(conn, Op.AUTH_FINISH, final)["principal"] == "alice"
    with pytest.raises(AuthenticationFailed):  # a second finish on the same connection
        scram_request(conn, Op.AUTH_FINISH, final)
    conn.close()
    # Replayed on a new connection: the server's nonce differs, the proof does not verify.
    cases = [(first, final), (first[: len(first) // 2], None), (first, final[:-10]),
             (first, final.replace("p=", "p=AAAA")), ("", None), (first, "")]
    for client_first, client_final in cases:
        conn = Connection(addr)
        try:
            with pytest.raises(AuthenticationFailed):
                scram_request(conn, Op.AUTH_START, client_first)
                scram_request(conn, Op.AUTH_FINISH, client_final or final)
            with pytest.raises(AuthenticationRequired):
                conn.request(Op.STATS, {}, 30)
        finally:
            conn.close()
    conn = Connection(addr)  # a finish without a start
    try:
        with pytest.raises(AuthenticationFailed):
            scram_request(conn, Op.AUTH_FINISH, final)
    finally:
        conn.close()


def random_text(rng: random.Random) -> str:
    alphabet = "nr=,cps0123456789abcdefABCDEF+/=\x00\u00e9 "
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 200)))


def test_thousands_of_random_handshake_frames_are_refused_and_others_keep_working(
        auth_server):
    """10 000 random handshake frames: 3 000 random SCRAM messages (pipelined, 150 per
    connection) and 7 000 random raw frames, each on a connection of its own: every one
    refused, the server alive, a logged-in client answered throughout."""
    rng = random.Random(13)
    addr = address(auth_server)
    done = threading.Event()
    answered = [0]

    def other_client() -> None:
        with Client(auth_server.address, user="alice", password=PASSWORD,
                    request_timeout=30) as client:
            while not done.is_set():
                client.call(Op.QUEUE_RANGE, {"topic": "t", "queue_id": 0})
                answered[0] += 1

    worker = threading.Thread(target=other_client)
    worker.start()
    refused = 0
    try:
        for _ in range(20):
            conn = Connection(addr)
            try:
                futures = [conn.submit(rng.choice([Op.AUTH_START, Op.AUTH_FINISH]),
                                       {"mechanism": rng.choice(["SCRAM-SHA-256", "x"]),
                                        "message": random_text(rng)})
                           for _ in range(150)]
                for fut in futures:
                    with pytest.raises(FMQError):
                        fut.result(60)
                    refused += 1
            finally:
                conn.close()
        for _ in range(7000):  # raw frames: random opcodes of the handshake, random bytes
            op = rng.choice([Op.HELLO, Op.AUTH_START, Op.AUTH_FINISH])
            frame = bytearray(encode_request(Op.PING, 1, {}))
            frame[5] = op
            frame += os.urandom(rng.randrange(0, 64))
            frame[0:4] = (len(frame) - 4).to_bytes(4, "big")
            with socket.create_connection(addr, timeout=30) as sock:
                sock.sendall(bytes(frame))
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(4096):
                    pass
    finally:
        done.set()
        worker.join(60)
    assert refused == 3000
    assert answered[0] > 0 and not worker.is_alive()
    assert auth_server.alive
    with Client(auth_server.address, user="alice", password=PASSWORD) as client:
        assert client.ping()["protocol_version"] == 1


def test_users_are_managed_on_a_running_server_and_passwords_never_logged(
        auth_server, tmp_path):
    admin = ("--user", "admin")
    env_password = {"FMQ_PASSWORD": PASSWORD}
    new_password = "a new password 42"
    pw_file = tmp_path / "new"
    pw_file.write_text(new_password + "\n")
    os.environ.update(env_password)
    try:
        out = run_cli("user", "add", "bob", "--server", auth_server.address, *admin,
                      "--new-password-file", str(pw_file))
        assert out.returncode == 0, out.stderr
        out = run_cli("user", "list", "--server", auth_server.address, *admin)
        assert out.stdout.split() == ["admin", "alice", "bob"]
        with Client(auth_server.address, user="bob", password=new_password) as client:
            client.call(Op.QUEUE_RANGE, {"topic": "t", "queue_id": 0})
            assert client.principal == "bob"
        out = run_cli("user", "passwd", "bob", "--server", auth_server.address, *admin,
                      "--new-password-file", str(tmp_path / "missing"))
        assert out.returncode == 2  # click: the file does not exist
        out = run_cli("user", "remove", "bob", "--server", auth_server.address, *admin)
        assert out.returncode == 0, out.stderr
        with pytest.raises(AuthenticationFailed), \
                Client(auth_server.address, user="bob", password=new_password) as client:
            client.ping()
        with pytest.raises(AuthenticationFailed), \
                Client(auth_server.address, user="alice", password=new_password) as client:
            client.ping()
    finally:
        for key in env_password:
            os.environ.pop(key, None)
    assert auth_server.stop() == 0
    log = auth_server.log()
    assert "authenticated as 'bob'" in log and "failed" in log
    for secret in (PASSWORD, new_password):
        assert secret not in log
    with open(os.path.join(auth_server.data_dir, "security.json")) as f:
        stored = f.read()
    assert PASSWORD not in stored and new_password not in stored


def test_users_are_managed_offline(tmp_path, monkeypatch):
    from tests.security.conftest import add_user_offline

    data = str(tmp_path / "d")
    add_user_offline(data, "carol")
    out = run_cli("user", "list", data)
    assert out.returncode == 0 and out.stdout.split() == ["carol"]
    monkeypatch.setenv("FMQ_NEW_PASSWORD", "x")
    out = run_cli("user", "add", "carol", data)
    assert out.returncode == 1 and "exists already" in out.stderr
    out = run_cli("user", "remove", "nobody", data)
    assert out.returncode == 1 and "no user 'nobody'" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_new_password_without_a_terminal_says_where_it_must_come_from(tmp_path,
                                                                      monkeypatch):
    """Without a terminal getpass warned (GetPassWarning, a getpass.py line) and the command
    ended in a bare 'Aborted!'."""
    monkeypatch.delenv("FMQ_NEW_PASSWORD", raising=False)
    data = str(tmp_path / "d")
    with fmq.Broker.open(data):
        pass
    out = run_cli("user", "add", "dave", data, input="")
    assert out.returncode == 2, out
    assert "FMQ_NEW_PASSWORD" in out.stderr and "--new-password-file" in out.stderr
    assert "GetPassWarning" not in out.stderr and "getpass.py" not in out.stderr
    assert "Aborted" not in out.stderr
    assert run_cli("user", "list", data).stdout.split() == []
