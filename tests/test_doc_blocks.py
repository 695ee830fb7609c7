"""Every ```python and ```bash block of README.md and docs/*.md runs here as written
(tests/doc_blocks.py says how), or NOT_RUN says why it cannot. Each runs in a temporary
directory against a real ``fmq server`` on 127.0.0.1 of its own, and may leave no
transaction open on it: an example that forgets to end one is wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import fmq
from fmq.client import Client, TLSOptions
from fmq.security import Rule, UserStore, make_credential
from tests.doc_blocks import DOCS, Block, doc_blocks, find_block, run_block, uses_kafka
from tests.server.harness import ServerProcess, broker_stats, free_port

FAST = {"tx_check_after_ms": 300, "checkpoint_interval_ms": 0,
        "server": {"shutdown_grace_ms": 10000}}


# The honest record of what is not run, (document, text only that block holds): why.
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "pip install . && fmq server"):
        "installs FMQ from the network into a new virtual environment, then serves until Ctrl-C",
    ("README.md", "python -m pytest"): "runs the whole test suite",
    ("docs/client.md", '"10.0.0.1:9876,10.0.0.2:9876,10.0.0.3:9876"'):
        "needs a three-server replication group on other hosts (tests/replication/ runs "
        "clients against real groups)",
    ("docs/client.md", "follower_reads=True"): "an excerpt continuing the block before it",
    ("docs/cluster.md", "--cluster-name prod --group g1"):
        "needs an etcd and servers that run until stopped, and asks for a password at a "
        "terminal (tests/cluster/ runs the same commands against a real etcd and servers)",
    ("docs/operations.md", "fmq log verify DATA_DIR"):
        "placeholders (DATA_DIR, OFFSET); the same commands run in tests/cli/",
    ("docs/operations.md", "[--config fmq.json]"): "a synopsis: brackets mark the options",
    ("docs/kafka.md", "fmq server --kafka-port 9092 &"):
        "starts a server with a Kafka port that runs until stopped (tests/kafka/ runs the "
        "same kcat commands against a real server)",
    ("docs/replication.md", "fmq server primary-data"):
        "starts servers that run until stopped, one terminal each (tests/replication/)",
    ("docs/replication.md", "etcd --data-dir etcd-data"):
        "needs an etcd and three long-running servers (tests/replication/)",
    ("docs/replication.md", "fmq replica promote --server FOLLOWER"):
        "placeholders (FOLLOWER, follower.toml, `...`)",
    ("docs/replication.md", "fmq replica bootstrap follower-data --from PRIMARY"):
        "placeholders (PRIMARY)",
    ("docs/scheduling.md", "c.run(handle)"):
        "an excerpt: two loops that read until the consumer is closed from another thread; "
        "handle and TemporaryError are the application's",
    ("docs/security.md", "fmq server --data-dir ./fmq-data --tls-cert server.pem"):
        "starts servers that run until stopped; the TLS blocks after it run against a "
        "server started with the same --tls-cert and --tls-key",
    ("docs/security.md", "fmq user add admin ./fmq-data"):
        "asks for passwords at a terminal; placeholders (`...`, app2.password)",
    ("docs/security.md", "FMQ_PASSWORD_FILE=~/.fmq-admin-password"):
        "asks for a password at a terminal; needs the admin's password file in $HOME",
    ("docs/security.md", "fmq user add app1 --coordinator etcd://10.0.0.9:2379"):
        "needs an etcd and a server on other hosts (tests/security/test_cluster_users.py "
        "runs the same commands against a real etcd)",
    ("docs/security.md", "etcd --cert-file etcd.pem --key-file etcd.key"):
        "an etcd and brokers on other hosts with their certificates "
        "(tests/coordination/test_etcd_tls.py does the same on 127.0.0.1)",
    ("docs/security.md", '"fmq.example.com:9876"'):
        "needs the remote host fmq.example.com and /run/secrets/fmq",
    ("docs/spark.md", "pip install 'fmq[spark]'"): "installs from the network",
    ("docs/spark.md", "fmq index rebuild /var/lib/fmq --spark"):
        "needs Spark and Java (tests/spark/ runs the rebuild)",
    ("docs/spark.md", "spark-submit --master spark://head:7077"): "needs a Spark cluster",
    ("docs/spark.md", "register(spark)                                   # once"):
        "needs Spark and Java; an excerpt (spark, path) (tests/spark/)",
    ("docs/spark.md", '.option("pushdown", "true")'): "needs Spark and Java; an excerpt",
    ("docs/spark.md", "PYSPARK_SUBMIT_ARGS"): "needs Spark and Java; makes a 173 MB class archive under ~/.cache/fmq (tests/spark/test_class_archive.py)",
    ("docs/spark.md", "fmq server --data-dir /var/lib/fmq --host 127.0.0.1 --port 7070 &"):
        "starts a server in the background (the next block runs against the test server)",
    ("docs/spark.md", 'readStream.format("fmq-topic")'):
        "needs Spark and Java; writes to /data (tests/spark/test_topic_stream.py)",
    ("docs/spark.md", 'spark.read.parquet("/data/orders-sink")'):
        "needs Spark and Java; an excerpt continuing the streaming query",
    ("docs/spark.md", "df.where(\"key = 'o-1'\").show()"): "needs Spark and Java; an excerpt",
}

# Blocks that run after others, in the same directory: (document, text): the blocks first.
AFTER: dict[tuple[str, str], list[tuple[str, str]]] = {
    ("docs/security.md", "--topic t --max 1"): [("docs/security.md", "# the CA")],
    ("docs/security.md", 'TLSOptions(ca_file="ca.pem")) as producer'):
        [("docs/security.md", "# the CA")],
    ("docs/security.md", "fmq acl remove ./fmq-data"):
        [("docs/security.md", "fmq acl add ./fmq-data --principal admin")],
}
#: Blocks that talk to a TLS server (certificates from security.md's own recipe).
TLS = {("docs/security.md", "--topic t --max 1"),
       ("docs/security.md", 'TLSOptions(ca_file="ca.pem")) as producer')}
#: Blocks that log in as alice with $PASSWORD: their server has users (admin and alice).
USERS = {("docs/kafka.md", "sasl.mechanisms=SCRAM-SHA-256")}
USER_PASSWORD = "correct horse battery staple"  # noqa: S105 - a test password
#: Blocks that start a Spark session of their own: each runs in a Python process of its
#: own (its session and JVM end with it, and no other test's session is touched).
OWN_PROCESS = {("docs/spark.md", 'option("topic", "clicks-upper")')}
#: Blocks that work on a stopped broker's ./fmq-data (no server).
OFFLINE = {("docs/security.md", "# the CA"),
           ("docs/security.md", "fmq acl add ./fmq-data --principal admin"),
           ("docs/security.md", "fmq acl remove ./fmq-data")}


def _key(block: Block, table) -> tuple[str, str] | None:
    hits = [k for k in table if k[0] == block.doc and k[1] in block.code]
    assert len(hits) <= 1, f"{block.name} matches several entries: {hits}"
    return hits[0] if hits else None


ALL_BLOCKS = [b for doc in DOCS for b in doc_blocks(doc)]
RUN = [b for b in ALL_BLOCKS if _key(b, NOT_RUN) is None]
#: A block that others run after runs as part of their tests, not once more on its own.
PREREQUISITES = {first for firsts in AFTER.values() for first in firsts}
RUN_ALONE = [b for b in RUN if _key(b, {k: None for k in PREREQUISITES}) is None]


def test_every_block_runs_or_says_why_not():
    for table in (NOT_RUN, AFTER, TLS, USERS, OFFLINE, OWN_PROCESS):
        for key in table:
            find_block(*key)  # each entry names exactly one block that still exists
    for key in AFTER.keys() | PREREQUISITES | TLS | USERS | OFFLINE | OWN_PROCESS:
        assert key not in NOT_RUN, f"{key} is both run and not run"
    assert len(RUN) + len(NOT_RUN) == len(ALL_BLOCKS)


def with_users(data_dir: Path) -> dict:
    """Users admin (every right) and alice (no rules) in a new broker at ``data_dir``; the
    client options that log in as admin."""
    with fmq.Broker.open(str(data_dir)):
        pass
    store = UserStore(str(data_dir))
    for user in ("admin", "alice"):
        store.put_user(user, make_credential(USER_PASSWORD), create=True)
    store.add_rule(Rule.make("admin", "cluster", "cluster", False, "all", True))
    return {"user": "admin", "password": USER_PASSWORD}


def start_server(data_dir: Path, cwd: Path, tls: bool, kafka_port: int | None = None,
                 users: bool = False) -> ServerProcess:
    if not tls:
        kafka = () if kafka_port is None else ("--kafka-port", str(kafka_port))
        login = with_users(data_dir) if users else None
        return ServerProcess(str(data_dir), FAST, extra_args=kafka,
                             client_options=login).start()
    return ServerProcess(str(data_dir), FAST,
                         extra_args=("--tls-cert", str(cwd / "server.pem"),
                                     "--tls-key", str(cwd / "server.key")),
                         client_options={"tls": TLSOptions(ca_file=str(cwd / "ca.pem"))}
                         ).start()


def _param(block: Block):
    if _key(block, {k: None for k in OWN_PROCESS}) is None:
        return block
    # A Spark session's JVM start and a streaming job on a loaded machine.
    return pytest.param(block, marks=pytest.mark.timeout(900))


@pytest.mark.parametrize("block", [_param(b) for b in RUN_ALONE],
                         ids=[b.name for b in RUN_ALONE])
def test_doc_block_runs_as_written(block, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    key = _key(block, {k: None for k in (*AFTER, *PREREQUISITES, *TLS, *USERS, *OFFLINE,
                                         *OWN_PROCESS)})
    if key in OFFLINE:
        with fmq.Broker.open(str(work / "fmq-data")):
            pass  # a stopped broker's directory, as the offline commands expect
    for first in AFTER.get(key, []):
        run_block(find_block(*first), work, None)
    if key in OFFLINE:
        run_block(block, work, None)
        return
    # A block written for the documented Kafka port gets one (127.0.0.1:9092 becomes it).
    kafka_port = free_port() if uses_kafka(block) else None
    srv = start_server(tmp_path / "server-data", work, key in TLS, kafka_port, key in USERS)
    try:
        run_block(block, work, srv.address,
                  None if kafka_port is None else f"127.0.0.1:{kafka_port}",
                  {"PASSWORD": USER_PASSWORD} if key in USERS else None,
                  own_process=key in OWN_PROCESS)
        stats = None
        if key not in TLS:
            with Client(srv.address, **srv.client_options) as client:
                stats = broker_stats(client)
        if kafka_port is not None:  # it did talk to the door, beyond asking what it serves
            served = stats["server"]["kafka"]["requests_by_api"]
            assert set(served) - {"ApiVersions", "Metadata"}, (block.name, served)
        if stats is not None:
            assert stats["open_transactions"] == 0, \
                f"{block.name} leaves a transaction open"
    finally:
        srv.kill()
