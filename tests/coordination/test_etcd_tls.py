"""etcd over TLS with client certificates (``etcds://HOST:PORT?ca=&cert=&key=``): the way
to run a cluster's etcd in production, since whoever can write to etcd can rewrite the
cluster's users, rules and routes (docs/security.md). A real etcd with
``--client-cert-auth``; certificates made by trustme."""

from __future__ import annotations

import os

import pytest
import trustme

from fmq.coordination.coordinator_url import parse_coordinator_url
from fmq.coordination.lease import LeaderLease
from fmq.coordination.routes import ClusterRoutes
from fmq.errors import ConfigError, CoordinatorUnavailable
from tests.etcdkit import ETCD, EtcdProcess, EtcdTLS
from tests.server.conftest import FAST
from tests.server.harness import ServerProcess, wait_until

NEEDS_ETCD = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    where = tmp_path_factory.mktemp("etcd-pki")
    ca, stranger = trustme.CA(), trustme.CA()

    def write(name: str, blob) -> str:
        path = str(where / name)
        blob.write_to_path(path)
        return path

    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("fmq-node")
    foreign = stranger.issue_cert("fmq-node")
    return {
        "tls": EtcdTLS(ca=write("ca.pem", ca.cert_pem),
                       cert=write("etcd.pem", server.cert_chain_pems[0]),
                       key=write("etcd.key", server.private_key_pem),
                       client_cert=write("node.pem", client.cert_chain_pems[0]),
                       client_key=write("node.key", client.private_key_pem)),
        "both": write("node-both.pem", client.private_key_and_cert_chain_pem),
        "stranger_ca": write("stranger-ca.pem", stranger.cert_pem),
        "foreign_cert": write("foreign.pem", foreign.cert_chain_pems[0]),
        "foreign_key": write("foreign.key", foreign.private_key_pem),
    }


@pytest.fixture(scope="module")
def etcd(pki, tmp_path_factory):
    if not os.path.exists(ETCD):
        pytest.skip("etcd is not installed (.ci/run installs etcd-server)")
    server = EtcdProcess(str(tmp_path_factory.mktemp("etcd-tls") / "etcd"), tls=pki["tls"])
    server.start()
    yield server
    server.stop()


def test_addresses_are_read_and_checked(pki):
    tls = pki["tls"]
    plain = parse_coordinator_url("etcd://10.0.0.1:2379")
    assert (plain.host, plain.port, plain.tls, plain.ca_file) == ("10.0.0.1", 2379, False, None)
    full = parse_coordinator_url(
        f"etcds://[::1]:2379?ca={tls.ca}&cert={tls.client_cert}&key={tls.client_key}")
    assert (full.host, full.tls, full.ca_file, full.cert_file, full.key_file) == (
        "::1", True, tls.ca, tls.client_cert, tls.client_key)
    assert parse_coordinator_url("etcds://h:1").ca_file is None  # the system's CAs
    bad = {
        f"etcd://h:1?ca={tls.ca}": "need TLS; write etcds://h:1",
        "etcds://h:1?ca=/no/such/file": "does not exist",
        f"etcds://h:1?key={tls.client_key}": "key= needs cert=",
        f"etcds://h:1?ca={tls.ca}&ca={tls.ca}": "give ca= once",
        "etcds://h:1?pem=x": "unknown option pem",
        "etcds://h:1?ca": "is not NAME=FILE",
        "etcds://h?ca=x": "port in 1..65535",
        "https://h:1": "etcds://HOST:PORT",
    }
    for url, why in bad.items():
        with pytest.raises(ConfigError, match=why):
            parse_coordinator_url(url)


@NEEDS_ETCD
def test_routes_and_the_lease_work_over_tls_with_a_client_certificate(etcd, pki,
                                                                     monkeypatch):
    # A CA bundle in the environment (as many machines set) must not replace the ca= file.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", pki["stranger_ca"])
    monkeypatch.setenv("CURL_CA_BUNDLE", pki["stranger_ca"])
    routes = ClusterRoutes(etcd.url, "tls")
    routes.register_group("g1")
    assert "g1" in routes.groups()
    lease = LeaderLease(etcd.url, "g1", "n1", "127.0.0.1:1", ttl_s=5)
    assert lease.try_acquire() is not None and lease.holds()
    lease.release()
    # The certificate and its key in one file work too.
    combined = etcd.tls_url(pki["tls"].ca, pki["both"], None)
    assert "g1" in ClusterRoutes(combined, "tls").groups()


@NEEDS_ETCD
@pytest.mark.parametrize("who", ["no client certificate", "a certificate of another CA",
                                 "an etcd certificate from another CA", "plaintext"])
def test_a_node_etcd_does_not_trust_or_that_does_not_trust_etcd_is_refused(etcd, pki, who):
    tls = pki["tls"]
    url = {
        "no client certificate": etcd.tls_url(tls.ca, None, None),
        "a certificate of another CA": etcd.tls_url(tls.ca, pki["foreign_cert"],
                                                    pki["foreign_key"]),
        "an etcd certificate from another CA": etcd.tls_url(pki["stranger_ca"],
                                                            tls.client_cert, tls.client_key),
        "plaintext": f"etcd://127.0.0.1:{etcd.client_port}",
    }[who]
    with pytest.raises(CoordinatorUnavailable, match=f"at {url.split('?')[0]}") as info:
        ClusterRoutes(url, "tls").groups()
    assert info.value.retriable


@NEEDS_ETCD
def test_a_server_elects_itself_through_an_etcd_over_tls(etcd, tmp_path):
    node = ServerProcess(str(tmp_path / "data"), FAST, extra_args=(
        "--coordinator", etcd.url, "--group", "g-tls", "--cluster-name", "tls"))
    node.start()
    try:
        routes = ClusterRoutes(etcd.url, "tls")
        wait_until(lambda: routes.groups().get("g-tls") is not None
                   and routes.groups()["g-tls"].primary == node.address, 60,
                   "the node to register its group and lead it over TLS")
    finally:
        node.kill()
