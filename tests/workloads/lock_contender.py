"""Try to open a data dir that another process holds, and report whether it was refused.

``python -m tests.workloads.lock_contender DATA_DIR [CONFIG_JSON]`` (BrokerConfig fields;
without it the default configuration). Refused with :class:`fmq.DataDirLocked`: prints
``LOCKED <path>`` and the error's message on the next line, exits with status 7. Opened:
prints ``OPENED`` and exits with status 1.
"""

from __future__ import annotations

import json
import sys

import fmq

REFUSED = 7


def main(argv: list[str]) -> None:
    data_dir, *config_json = argv
    config = fmq.BrokerConfig(**json.loads(config_json[0])) if config_json else None
    try:
        fmq.Broker.open(data_dir, config)
    except fmq.DataDirLocked as exc:
        print("LOCKED", exc.path)
        print(exc)
        sys.exit(REFUSED)
    print("OPENED")
    sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
