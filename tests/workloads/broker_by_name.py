"""Reach the broker by its public name in a fresh interpreter: ``from fmq import Broker``
must give the class that ``fmq.Broker`` names (it is loaded on first use).

``python -m tests.workloads.broker_by_name``: prints the class's name and whether the two
are the same object.
"""

from __future__ import annotations

import fmq
from fmq import Broker


def main() -> None:
    print(Broker.__name__, fmq.Broker is Broker)


if __name__ == "__main__":
    main()
