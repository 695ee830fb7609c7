"""The Python daemon of the Spark sessions the FMQ jobs create
(``spark.python.daemon.module``): Spark's own (:mod:`pyspark.daemon`), started with
pyspark imported from the installed package instead of ``pyspark.zip``.

Spark puts ``SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's path. A
module imported from a zip is compiled from source in every process (no ``.pyc`` is
written back into a zip), and the daemon's forked workers import ``pyspark.worker`` (most
of pyspark) after the fork, so each new worker spent about a second of CPU compiling
pyspark (measured: ``import pyspark.worker`` 1.2 CPU s from the zip, 0.25 from the
installed package). Where the zip is the one inside an installed pyspark (``pip install
pyspark``: ``site-packages/pyspark/python/lib/pyspark.zip``), the installed package is the
same code with its byte code cached: the zip moves to the end of the path. A zip of a Spark
distribution unpacked elsewhere stays first (the installed pyspark, if any, may be another
version).
"""

from __future__ import annotations

import os
import sys


def installed_first(path: list[str]) -> list[str]:
    """``path`` with every ``pyspark.zip`` that lies inside an installed pyspark package
    moved to the end (see the module's text)."""
    def inside_installed(entry: str) -> bool:
        if os.path.basename(entry) != "pyspark.zip":
            return False
        package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(entry))))
        return (os.path.basename(package) == "pyspark"
                and os.path.isfile(os.path.join(package, "__init__.py")))

    moved = [p for p in path if inside_installed(p)]
    return [p for p in path if p not in moved] + moved


if __name__ == "__main__":
    sys.path[:] = installed_first(sys.path)
    from pyspark.daemon import manager  # the workers it forks import from the same path

    manager()
