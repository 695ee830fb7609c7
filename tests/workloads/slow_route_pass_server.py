"""``fmq server`` whose primary's pass making route entries local topics waits while a file
(the *stall file*) exists, as a pass queued behind a busy writer would.

``python -m tests.workloads.slow_route_pass_server STALL_FILE server ARGS...``: runs
``fmq server ARGS...``; each pass waits while STALL_FILE exists (at most 60 s). The
server is the real one; only the pass's start is the test's.
"""

from __future__ import annotations

import os
import sys
import time

from fmq.server.cluster.route_membership import RouteMembership

#: The longest one stall lasts, whatever the stall file says.
MAX_STALL_S = 60.0


def stall_route_passes(stall_file: str) -> None:
    make = RouteMembership.make_topics_now

    def stalled(self: RouteMembership, *args, **kwargs):  # noqa: ANN002, ANN003
        deadline = time.monotonic() + MAX_STALL_S
        while os.path.exists(stall_file) and time.monotonic() < deadline:
            time.sleep(0.01)
        return make(self, *args, **kwargs)

    RouteMembership.make_topics_now = stalled  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    stall_file, *fmq_args = argv
    stall_route_passes(stall_file)
    from cli.main import cli

    cli(fmq_args)


if __name__ == "__main__":
    main(sys.argv[1:])
