"""With TLS configured the console serves HTTPS with the server's own certificate."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request

import pytest

from fmq.client.tls import TLSOptions
from tests.security.conftest import certs, secure_server  # noqa: F401 - fixtures
from tests.server.harness import free_port


def test_the_console_serves_https_with_the_servers_certificate(certs, secure_server):  # noqa: F811
    port = free_port()
    secure_server(certs.server_config(), {"tls": TLSOptions(ca_file=certs.ca)},
                  extra_args=("--console-port", str(port)))
    trusting = ssl.create_default_context(cafile=certs.ca)
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/topics", context=trusting,
                                timeout=10) as page:
        assert page.status == 200 and b"<h1>Topics</h1>" in page.read()
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # no plaintext answer
        urllib.request.urlopen(f"http://127.0.0.1:{port}/topics", timeout=10).read()
    other = ssl.create_default_context(cafile=certs.other_ca)
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"https://127.0.0.1:{port}/topics", context=other, timeout=10)
