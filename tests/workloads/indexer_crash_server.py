"""The real ``fmq server`` command, whose broker runs :mod:`tests.workloads.crashing_indexer`
as its indexer process (``index_writer = "process"``; the crash plan comes in that module's
environment variable).

``python -m tests.workloads.indexer_crash_server server --data-dir DIR ...`` (the arguments
of ``fmq``), from the repository root so that ``tests`` is importable by the indexer too.
"""

from __future__ import annotations

import sys

from fmq.cli.main import cli

from fmq.index.process_dispatcher import ProcessDispatcher


def main() -> None:
    ProcessDispatcher.indexer_module = "tests.workloads.crashing_indexer"
    cli(args=sys.argv[1:], prog_name="fmq")


if __name__ == "__main__":
    main()
