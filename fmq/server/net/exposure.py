"""The safe default: a server without users listens on loopback only.

Asked to listen on any other address while the data directory has no users, the server
refuses to start and says how to add one, unless the operator passed ``--insecure``
(``run_server(..., insecure=True)``): anyone who can reach the port could then do anything.
"""

from __future__ import annotations

import ipaddress
import socket

from fmq.errors import ConfigError


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address ("" and 0.0.0.0,
    every interface, are not)."""
    if host in ("", "0.0.0.0", "::"):
        return False
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {info[4][0].split("%")[0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def check_exposure(host: str, has_users: bool, insecure: bool, data_dir: str) -> None:
    """Raise ConfigError when a server without users would listen beyond loopback."""
    if has_users or insecure or is_loopback(host):
        return
    raise ConfigError(
        f"refusing to listen on {host!r} without authentication: this data directory has no "
        f"users, so anyone who can reach the port could read, write and delete everything. "
        f"Add a user and its rules first (`fmq user add admin {data_dir}`, then `fmq acl "
        f"add {data_dir} --principal admin --operation all --cluster`; docs/security.md), "
        f"listen on 127.0.0.1, or pass --insecure to accept the risk")
