"""Import one module in a fresh interpreter and report which of the watched modules that
loaded: how a test proves that a client application needs no storage module.

``python -m tests.workloads.import_probe MODULE [WATCHED ...]``: prints the WATCHED
modules found in ``sys.modules`` after ``import MODULE``, comma-separated (an empty line
when none). Imports nothing of fmq itself before MODULE.
"""

from __future__ import annotations

import importlib
import sys


def main(argv: list[str]) -> None:
    module, *watched = argv
    importlib.import_module(module)
    print(",".join(m for m in watched if m in sys.modules))


if __name__ == "__main__":
    main(sys.argv[1:])
