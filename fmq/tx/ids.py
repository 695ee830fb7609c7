"""Transaction ids: ``version-ip-start time-pid-connection seq-tx seq``, unique across the
processes and restarts of a host."""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time

from fmq.version import __version__

_START_MS = int(time.time() * 1000)
_tx_seq = itertools.count(1)
_lock = threading.Lock()


def _local_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


_IP = _local_ip()


def new_tx_id(connection_seq: int = 0) -> str:
    """A transaction id unique across processes and restarts of this host's clients."""
    with _lock:
        seq = next(_tx_seq)
    return f"{__version__}-{_IP}-{_START_MS}-{os.getpid()}-{connection_seq}-{seq}"
