"""A real FMQ server whose disk stalls: every fdatasync of its log waits while a file (the
*stall file*) exists, as a disk that stopped answering would hold it.

``python -m tests.workloads.stalled_disk_server DATA_DIR PORT STALL_FILE STOP``: serves on
127.0.0.1:PORT until SIGTERM. Create STALL_FILE to stall the disk, delete it to let the
waiting fdatasync go on (a stall lasts at most 60 s). STOP is how SIGTERM stops it:
``graceful`` (the server's own stop, with ``shutdown_grace_ms`` 500) or ``cancelled`` (the
serving task is cancelled and the event loop's runner cancels every request still running,
their connections still open: what a serve ended by an exception leaves). The server is the
real :class:`fmq.server.Server`; only the file I/O seam is the test's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time

import fmq
from fmq.log.fileio import FileIO
from fmq.server.config import ServerConfig
from fmq.server.server import Server

#: The broker's settings.
CONFIG = fmq.BrokerConfig(segment_size=256 * 1024, max_message_size=4096,
                          checkpoint_interval_ms=0, retention_interval_ms=0)

#: The longest one stall lasts, whatever the stall file says.
MAX_STALL_S = 60.0


class StalledDiskIO(FileIO):
    """fdatasync waits while ``stall_file`` exists (at most :data:`MAX_STALL_S`)."""

    def __init__(self, stall_file: str) -> None:
        self.stall_file = stall_file

    def fdatasync(self, fd: int) -> None:
        deadline = time.monotonic() + MAX_STALL_S
        while os.path.exists(self.stall_file) and time.monotonic() < deadline:
            time.sleep(0.01)
        super().fdatasync(fd)


async def serve_until_cancelled(server: Server) -> None:
    """Serve until SIGTERM, then cancel the serving task (no graceful shutdown); returning
    makes ``asyncio.run`` cancel the requests still running."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    serving = asyncio.create_task(server.serve(install_signals=False))
    await stop.wait()
    serving.cancel()


def main(argv: list[str]) -> None:
    data_dir, port, stall_file, stop = argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    broker = fmq.Broker.open(data_dir, CONFIG, io=StalledDiskIO(stall_file))
    server = Server(broker, ServerConfig(host="127.0.0.1", port=int(port),
                                         shutdown_grace_ms=500))
    try:
        asyncio.run(server.serve() if stop == "graceful" else serve_until_cancelled(server))
    finally:
        broker.close()


if __name__ == "__main__":
    main(sys.argv[1:])
