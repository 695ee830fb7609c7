"""The Python daemon of the job's sessions (``fmq.spark.worker_daemon``): a
``pyspark.zip`` that lies inside an installed pyspark goes to the end of the workers' path
(so pyspark is imported with its byte code cached), any other stays where it is."""

from __future__ import annotations

import os
import subprocess
import sys

import pyspark

from fmq.spark.worker_daemon import installed_first


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
