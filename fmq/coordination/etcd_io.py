"""What every user of etcd shares (the leader lease, the users' document, the routes): the
optional etcd client (plaintext or TLS, :mod:`fmq.coordination.coordinator_url`), base64
keys, one error for an unreachable etcd, and a watch that ends.

``etcd3gw`` and ``requests`` (which it brings) are an optional dependency
(``pip install 'fmq[replication]'``): importing this module without them works, and
:func:`open_client` says what to install.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import random
import re
from collections.abc import Callable
from typing import Any

from fmq.coordination.coordinator_url import parse_coordinator_url
from fmq.errors import ConfigError, CoordinatorUnavailable

try:
    import etcd3gw
    import requests  # etcd3gw's HTTP client: the watch streams through it
    from etcd3gw.exceptions import Etcd3Exception

    RequestException: type[Exception] = requests.RequestException
except ImportError:  # only a node that uses etcd needs it
    etcd3gw = None
    Etcd3Exception = RequestException = Exception


#: The OS's reason inside a connection error's long text ("[Errno 111] Connection refused").
_ERRNO = re.compile(r"\[Errno (-?\d+)\]([^\"')]*)")
#: The OS's reasons an operator meets most, in words that say what they mean.
_REASONS = {
    errno.ECONNREFUSED: "connection refused (nothing listens at that address)",
    errno.ETIMEDOUT: "no answer (timed out)",
    errno.EHOSTUNREACH: "the host cannot be reached",
    errno.ENETUNREACH: "the network cannot be reached",
}


def describe_cause(exc: BaseException) -> str:
    """Why an etcd request failed, in words, never empty: etcd3gw's connection errors have
    an empty message and keep the reason in ``detail_text`` (or the exception they came
    from); an OS error is named by what it means, not by its class and number."""
    text = (str(exc).strip() or str(getattr(exc, "detail_text", "") or "").strip()
            or str(exc.__context__ or "").strip())
    found = _ERRNO.search(text)
    if found:
        number = int(found.group(1))
        return _REASONS.get(number) or found.group(2).strip().lower() or os.strerror(number)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def open_client(coordinator: str, request_timeout_s: float, purpose: str) -> Any:
    """An etcd client for ``coordinator`` (etcd://HOST:PORT, or etcds://... for TLS with
    its CA and client certificate); ``purpose`` names what needs it in the error raised when
    etcd3gw is not installed."""
    address = parse_coordinator_url(coordinator)
    if etcd3gw is None:
        raise ConfigError(f"{purpose}: the etcd3gw package is not installed; "
                          f"pip install 'fmq[replication]'")
    client = etcd3gw.client(host=address.host, port=address.port, timeout=request_timeout_s,
                            api_path="/v3/", protocol="https" if address.tls else "http",
                            ca_cert=address.ca_file)
    if address.ca_file is not None:
        # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE override a session's CA, so a
        # named ca= file would lose to the environment's: the address says it all.
        client.session.trust_env = False
    if address.cert_file is not None:  # etcd3gw sets it only for a separate key file
        client.session.cert = ((address.cert_file, address.key_file) if address.key_file
                               else address.cert_file)
    return client


def call(coordinator: str, what: str, request: Callable[[], Any]) -> Any:
    """Run one etcd request; CoordinatorUnavailable when etcd cannot be reached."""
    try:
        return request()
    except (Etcd3Exception, OSError, RequestException) as exc:
        raise CoordinatorUnavailable(
            f"could not {what} at {coordinator}: {describe_cause(exc)}. Check that "
            f"etcd runs there and is reachable, then try again") from None


def wait_for_change(etcd: Any, key: str, after_revision: int, timeout_s: float,
                    range_end: str | None = None) -> None:
    """Return when ``key`` (or the range up to ``range_end``) changes after
    ``after_revision``, when etcd cancels the watch, after ``timeout_s`` without a byte from
    etcd, or at once when etcd cannot be asked. A watch stream can stop delivering without
    an error; the time-out bounds how long a change can go unseen."""
    create = {"key": b64(key), "start_revision": after_revision + 1}
    if range_end is not None:
        create["range_end"] = b64(range_end)
    try:
        with etcd.session.post(etcd.get_url("/watch"), json={"create_request": create},
                               stream=True, timeout=(2.0, timeout_s)) as resp:
            for line in resp.iter_lines():
                result = json.loads(line).get("result", {}) if line else {}
                if result.get("events") or result.get("canceled"):
                    return
    except (OSError, ValueError, RequestException):
        return


#: The retries' own generator: a follower thread never moves the process's global
#: ``random`` state, which an application may have seeded for a reproducible sequence.
_JITTER = random.Random()


def retry_delay(resync_s: float) -> float:
    """Seconds before a follower (of the routes, of the users) tries etcd again after it was
    unreachable: 1-2 s with jitter, so that a cluster's nodes do not retry in step, and at
    most ``resync_s``."""
    return min(resync_s, 1.0 + _JITTER.random())
