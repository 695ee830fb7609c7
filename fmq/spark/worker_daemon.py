"""The Python daemon of the Spark sessions the FMQ jobs create
(``spark.python.daemon.module``): Spark's own (:mod:`pyspark.daemon`), started with
pyspark imported from the installed package instead of ``pyspark.zip``, and with the
modules its workers run imported once, before it forks them, and frozen.

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

Spark's daemon forks a worker per task slot, and a reused worker runs ``gc.collect()``
after every task: with pyarrow, pandas and fmq imported, a full collection walks some
80,000 objects, 30 ms of CPU, once per task (a quarter of a warm worker's CPU in the
rebuild's scan, 15 tasks per GB). :func:`preload` imports what the workers run
(:data:`PRELOADED`) in the daemon and freezes it (``gc.freeze``): the collections after
each task skip those objects, every forked worker starts with them imported (each
further worker pays no import of its own) and shares their memory instead of copying it
as the collector touches it.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

#: What the Python workers of the FMQ jobs' sessions import: pyspark's worker, Arrow (with
#: pandas, which pyarrow imports on its first array) and the rebuild's scan (with the data
#: source's reader).
PRELOADED = ("pyspark.worker", "pyarrow", "pyarrow.compute", "pandas", "fmq.spark.scan")


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


def preload(modules: tuple[str, ...] = PRELOADED) -> None:
    """Import ``modules`` and freeze every object alive (see the module's text)."""
    for name in modules:
        importlib.import_module(name)
    gc.freeze()


if __name__ == "__main__":
    sys.path[:] = installed_first(sys.path)
    preload()  # after the path: the workers it forks import from the same one
    from pyspark.daemon import manager

    manager()
