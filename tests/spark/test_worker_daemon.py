"""The Python daemon of the job's sessions (``fmq.spark.worker_daemon``): a
``pyspark.zip`` that lies inside an installed pyspark goes to the end of the workers' path
(so pyspark is imported with its byte code cached), any other stays where it is; the
modules the workers run are imported and frozen before it forks them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyspark
import pytest

from fmq.spark.worker_daemon import PRELOADED, installed_first


def _package(root, name: str = "pyspark"):
    package = root / name
    (package / "python" / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    return str(package / "python" / "lib" / "pyspark.zip")


def test_the_zip_of_an_installed_pyspark_goes_last(tmp_path):
    zipped = _package(tmp_path / "site-packages")
    py4j = str(tmp_path / "site-packages" / "pyspark" / "python" / "lib" / "py4j-src.zip")
    path = [zipped, py4j, "/app", str(tmp_path / "site-packages")]
    assert installed_first(path) == [py4j, "/app", str(tmp_path / "site-packages"), zipped]


def test_the_zip_of_a_spark_distribution_stays_first(tmp_path):
    # SPARK_HOME=/opt/spark: /opt/spark/python/lib/pyspark.zip, no package around it.
    home = tmp_path / "spark-4.1.0-bin-hadoop3"
    (home / "python" / "lib").mkdir(parents=True)
    zipped = str(home / "python" / "lib" / "pyspark.zip")
    path = [zipped, "/site-packages"]
    assert installed_first(path) == path
    # A directory named pyspark without __init__.py is no installed package either.
    other = tmp_path / "x" / "pyspark" / "python" / "lib"
    other.mkdir(parents=True)
    path = [str(other / "pyspark.zip"), "/site-packages"]
    assert installed_first(path) == path


def test_the_daemon_imports_the_installed_pyspark(tmp_path):
    """A fresh interpreter started as Spark starts the daemon (the installed pyspark's
    own zip first on PYTHONPATH) imports pyspark from the package, not from the zip."""
    lib = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")
    zipped = os.path.join(lib, "pyspark.zip")
    assert os.path.exists(zipped), "the installed pyspark carries no pyspark.zip"
    probe = ("import sys; import fmq.spark.worker_daemon as d; "
             "sys.path[:] = d.installed_first(sys.path); import pyspark.worker, pyspark; "
             "print(pyspark.__file__)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": zipped}, timeout=120, check=True)
    assert done.stdout.strip() == pyspark.__file__
    # Without the reordering the zip wins: what the workers did before.
    plain = subprocess.run([sys.executable, "-c", "import pyspark; print(pyspark.__file__)"],
                           capture_output=True, text=True, env={**os.environ,
                                                                "PYTHONPATH": zipped},
                           timeout=120, check=True)
    assert plain.stdout.strip().startswith(zipped)


# A session of its own (Spark allows one per process): the job's session with its daemon.
_WORKER_PROBE = """
import gc, json, sys
from fmq.spark.session import spark_session
names = sys.argv[1:]  # here: in the worker, sys.argv is the worker's own
spark, _ = spark_session("local[1]")
seen = spark.sparkContext.parallelize([0], 1).map(
    lambda _: (gc.get_freeze_count(), [m for m in names if m in sys.modules])).collect()
spark.stop()
print(json.dumps(seen[0]))
"""


@pytest.mark.timeout(300)
def test_a_worker_starts_with_what_it_runs_imported_and_frozen(tmp_path):
    """In a real local session the job creates, the worker the daemon forks has the
    preloaded modules before its task imports anything, and they sit in the collector's
    permanent generation (so the ``gc.collect()`` after each task skips them)."""
    done = subprocess.run([sys.executable, "-c", _WORKER_PROBE, *PRELOADED],
                          capture_output=True, text=True, timeout=280, cwd=tmp_path,
                          env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert done.returncode == 0, done.stderr[-3000:]
    frozen, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert imported == list(PRELOADED)
    # Tens of thousands of objects: pyarrow, pandas and fmq's scan, not a handful.
    assert frozen > 20_000, frozen
