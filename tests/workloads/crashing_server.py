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
from collections.abc import Callable
from typing import Any

import fmq
from fmq.server.config import ServerConfig
from fmq.server.server import Server
from tests.crashkit import CrashingIO


def arm_before_first_commit(broker: fmq.Broker, io: CrashingIO, arm: dict[str, Any]) -> None:
    # Every commit places its records through one of these: one at a time (in a worker
    # thread, or alone in its turn of the send pipeline), or with its turn's others.
    writer = broker._tx_writer
    for name in ("place_commit_records", "place_commits"):
        place = getattr(writer, name)

        def armed_place(arg: Any, place: Callable[[Any], Any] = place) -> Any:
            if io.plan is None:
                io.arm(**arm)
            return place(arg)

        setattr(writer, name, armed_place)


def serve_until_killed(data_dir: str, broker_config: dict, io: CrashingIO,
                       server_config: ServerConfig,
                       arm: Callable[[fmq.Broker], None]) -> None:
    """Open the broker on ``io``, let ``arm`` arm it, serve; exit 3 if the server ever
    stops, since the armed crash should have ended the process first."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    broker = fmq.Broker.open(data_dir, fmq.BrokerConfig(**broker_config), io=io)
    arm(broker)
    try:
        asyncio.run(Server(broker, server_config).serve())
    finally:
        broker.close()
    sys.exit(3)


def main(argv: list[str]) -> None:
    data_dir, port, spec_text = argv
    spec = json.loads(spec_text)
    io = CrashingIO()

    def arm(broker: fmq.Broker) -> None:
        if spec["arm_on"] == "start":
            io.arm(**spec["arm"])
        else:
            arm_before_first_commit(broker, io, spec["arm"])

    serve_until_killed(data_dir, spec["config"], io,
                       ServerConfig(host="127.0.0.1", port=int(port)), arm)


if __name__ == "__main__":
    main(sys.argv[1:])
