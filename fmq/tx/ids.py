"""Transaction ids: ``version-ip-start time-pid-connection seq-tx seq``, unique across the
processes and restarts of a host; and the scope a caller may give its own ids
(``SCOPE//NAME``, docs/transactions.md, *Scopes*)."""

from __future__ import annotations

import itertools
import os
import socket
import time

from fmq.version import __version__

_START_MS = int(time.time() * 1000)
_tx_seq = itertools.count(1)


def _local_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


_IP = _local_ip()


_prefix = ""  # everything but the sequence numbers; remade in a forked child (new pid)


def _make_prefix() -> None:
    global _prefix
    _prefix = f"{__version__}-{_IP}-{_START_MS}-{os.getpid()}-"


_make_prefix()
os.register_at_fork(after_in_child=_make_prefix)


def new_tx_id(connection_seq: int = 0) -> str:
    """A transaction id unique across processes and restarts of this host's clients."""
    # One per PREPARE on the server's event loop: the fixed part is formatted once, and
    # no lock is taken: the counter's next() is one call into C, which no other thread
    # interleaves with under the interpreter lock (two threads never get one number).
    return f"{_prefix}{connection_seq}-{next(_tx_seq)}"


#: Separates a transaction id's scope from the rest of it: ``SCOPE//NAME``. Two characters
#: no topic name holds, so no id the Kafka door makes from a topic has a scope.
SCOPE_SEPARATOR = "//"


def scope_of(tx_id: str) -> str | None:
    """The scope of ``tx_id``: what precedes its first ``//``; None when it has none."""
    scope, separator, _name = tx_id.partition(SCOPE_SEPARATOR)
    return scope if separator and scope else None
