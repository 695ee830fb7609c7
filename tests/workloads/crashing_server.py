"""A real FMQ server whose broker kills its own process (SIGKILL) at an armed I/O step.

``python -m tests.workloads.crashing_server DATA_DIR PORT SPEC_JSON``; ``SPEC_JSON`` is an
object with ``config`` (BrokerConfig fields), ``arm`` (:meth:`tests.crashkit.CrashingIO.arm`
keyword arguments) and ``arm_on``: ``"start"`` arms at once, ``"commit"`` arms when the
first commit begins (so the prepare before it runs undisturbed).

The server is the real :class:`fmq.server.Server` on 127.0.0.1; only the file I/O seam
is the crash harness's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

import fmq
from fmq.server.config import ServerConfig
from fmq.server.server import Server
from tests.crashkit import CrashingIO


def arm_before_first_commit(broker: fmq.Broker, io: CrashingIO, arm: dict[str, Any]) -> None:
    # Every commit (on the send pipeline or in a worker thread) places its records here.
    place = broker._tx_writer.place_commit_records

    def armed_place(tx: Any) -> int:
        if io.plan is None:
            io.arm(**arm)
        return place(tx)

    broker._tx_writer.place_commit_records = armed_place  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    data_dir, port, spec_text = argv
    spec = json.loads(spec_text)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    io = CrashingIO()
    broker = fmq.Broker.open(data_dir, fmq.BrokerConfig(**spec["config"]), io=io)
    if spec["arm_on"] == "start":
        io.arm(**spec["arm"])
    else:
        arm_before_first_commit(broker, io, spec["arm"])
    server = Server(broker, ServerConfig(host="127.0.0.1", port=int(port)))
    try:
        asyncio.run(server.serve())
    finally:
        broker.close()
    sys.exit(3)  # the armed crash never came


if __name__ == "__main__":
    main(sys.argv[1:])
