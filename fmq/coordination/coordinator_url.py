"""Where etcd is and how to reach it, as one string every command and setting takes.

* ``etcd://HOST:PORT``: plaintext HTTP to etcd's client port (a test or a closed network).
* ``etcds://HOST:PORT?ca=FILE&cert=FILE&key=FILE``: TLS. ``ca`` is the CA that signed
  etcd's server certificate (the system's CAs when left out); ``cert`` and ``key`` are this
  node's client certificate and its key, for an etcd started with ``--client-cert-auth``
  (production: without a client certificate, anyone who reaches etcd's port can rewrite the
  cluster's users, rules and routes). ``cert`` may hold the key too; then ``key`` is left
  out.

One string keeps the whole address in the places that already pass it along (the server's
``coordinator`` setting, ``--coordinator`` of every command); the files are checked when the
string is read, so a typo fails at start, not at the first etcd request.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import parse_qs

from fmq.errors import ConfigError

PLAIN_SCHEME = "etcd://"
TLS_SCHEME = "etcds://"
_FILES = ("ca", "cert", "key")
_SHAPE = ("must look like etcd://HOST:PORT, or etcds://HOST:PORT?ca=FILE&cert=FILE&key=FILE "
          "for TLS (the address of etcd's client port, e.g. etcd://127.0.0.1:2379)")


@dataclass(frozen=True)
class CoordinatorAddress:
    host: str
    port: int
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None


def _files(url: str, query: str) -> dict[str, str]:
    try:
        fields = parse_qs(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise ConfigError(f"coordinator {url!r}: {query!r} is not NAME=FILE&...; it "
                          f"{_SHAPE}") from None
    unknown = sorted(set(fields) - set(_FILES))
    if unknown:
        raise ConfigError(f"coordinator {url!r}: unknown option {', '.join(unknown)}; the "
                          f"options are ca, cert and key (files)")
    files = {}
    for name, values in fields.items():
        if len(values) != 1 or not values[0]:
            raise ConfigError(f"coordinator {url!r}: give {name}= once, with a file")
        if not os.path.isfile(values[0]):
            raise ConfigError(f"coordinator {url!r}: the {name} file {values[0]!r} does not "
                              f"exist or is not a file")
        files[name] = values[0]
    if "key" in files and "cert" not in files:
        raise ConfigError(f"coordinator {url!r}: key= needs cert= (the client certificate "
                          f"the key belongs to)")
    return files


def parse_coordinator_url(url: object) -> CoordinatorAddress:
    """``url`` read, or a ConfigError saying what is wrong with it."""
    if not isinstance(url, str):
        raise ConfigError(f"coordinator {url!r} {_SHAPE}")
    if url.startswith(TLS_SCHEME):
        tls, rest = True, url[len(TLS_SCHEME):]
    elif url.startswith(PLAIN_SCHEME):
        tls, rest = False, url[len(PLAIN_SCHEME):]
    else:
        raise ConfigError(f"coordinator {url!r} {_SHAPE}")
    address, _, query = rest.partition("?")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65_536:
        raise ConfigError(f"coordinator {url!r} {_SHAPE}, with a port in 1..65535")
    files = _files(url, query) if query else {}
    if files and not tls:
        raise ConfigError(f"coordinator {url!r}: certificate files need TLS; write "
                          f"etcds://{address}?{query}")
    return CoordinatorAddress(host.strip("[]"), int(port), tls, files.get("ca"),
                              files.get("cert"), files.get("key"))


def parse_coordinator(url: object) -> tuple[str, int]:
    """``url``'s host and port (ConfigError when it is not a coordinator address)."""
    address = parse_coordinator_url(url)
    return address.host, address.port
