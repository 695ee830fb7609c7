"""A real FMQ server with its Kafka door whose broker, once a Kafka EndTxn decides to
commit, kills its own process (SIGKILL) at an armed I/O step, or fails it with EIO.

``python -m tests.workloads.crashing_kafka_server DATA_DIR PORT KAFKA_PORT SPEC_JSON``;
``SPEC_JSON`` is an object with ``arm``: :meth:`tests.crashkit.CrashingIO.arm` keyword
arguments, whose ``mode`` may also be ``"eio"`` (the operation raises ``OSError(EIO)``
instead of running: the log fails, the server lives on). The count starts when EndTxn's
commit begins (before its decision record), so operation N is the N-th write or fsync of
the decision, of the FMQ COMMITs, of the offsets and of the final state.

The server is the real :class:`fmq.server.Server`; only the file I/O seam is the crash
harness's.
"""

from __future__ import annotations

import errno
import json
import sys

from fmq.server.config import ServerConfig
from fmq.server.kafka.txn_coordinator import TxnCoordinator
from tests.crashkit import CrashingIO
from tests.workloads.crashing_server import serve_until_killed


class FailingOrCrashingIO(CrashingIO):
    """CrashingIO with one more mode, ``eio``: the armed operation raises EIO."""

    def _hit(self, op: str, path_hint: str = "") -> dict | None:
        plan = super()._hit(op, path_hint)
        if plan is not None and plan["mode"] == "eio":
            raise OSError(errno.EIO, f"injected EIO at {op} of {path_hint or 'a file'}")
        return plan


def arm_when_end_txn_commits(io: CrashingIO, arm: dict) -> None:
    decide = TxnCoordinator._decide

    async def armed_decide(self: TxnCoordinator, state, commit: bool) -> None:
        if commit and io.plan is None:
            io.arm(**arm)
        await decide(self, state, commit)

    TxnCoordinator._decide = armed_decide  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    data_dir, port, kafka_port, spec_text = argv
    spec = json.loads(spec_text)
    io = FailingOrCrashingIO()
    serve_until_killed(data_dir, spec.get("config", {}), io,
                       ServerConfig(host="127.0.0.1", port=int(port),
                                    kafka_port=int(kafka_port)),
                       lambda _broker: arm_when_end_txn_commits(io, spec["arm"]))


if __name__ == "__main__":
    main(sys.argv[1:])
