"""The JVM class archive of the jobs' local sessions (``fmq.spark.class_archive``,
``FMQ_SPARK_CLASS_ARCHIVE``): the options a session gets, and a real archive made by the
module's command and mapped by the JVM of a session started afterwards (each in a child
process of its own: the archive is written when that process's JVM exits)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fmq.errors import InvalidArgument
from fmq.spark.session import CLASS_ARCHIVE_ENV, LOCAL_JAVA_OPTIONS, local_java_options
from tests.crashkit import ROOT

# A child starts a local session with the archive and prints whether its JVM mapped it.
_MAPPED = """
import os, sys
from pyspark import SparkContext
from fmq.spark.session import spark_session
spark, created = spark_session("local[1]", app_name="fmq-archive-check")
assert created
pid = SparkContext._gateway.proc.pid
with open(f"/proc/{pid}/maps") as f:
    mapped = os.environ["FMQ_SPARK_CLASS_ARCHIVE"] in f.read()
print("archive-mapped" if mapped else "archive-not-mapped", spark.range(10).count())
spark.stop()
"""


def test_the_archive_option_is_given_only_for_an_existing_file(tmp_path, monkeypatch):
    monkeypatch.delenv(CLASS_ARCHIVE_ENV, raising=False)
    assert local_java_options() == LOCAL_JAVA_OPTIONS
    archive = tmp_path / "spark.jsa"
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, str(archive))
    assert local_java_options() == LOCAL_JAVA_OPTIONS  # not made yet: started without
    archive.write_bytes(b"archive")
    options = local_java_options().split()
    assert options[0] == LOCAL_JAVA_OPTIONS
    assert f"-XX:SharedArchiveFile={archive}" in options
    spaced = tmp_path / "a b.jsa"
    spaced.write_bytes(b"archive")
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, str(spaced))
    with pytest.raises(InvalidArgument, match="space"):
        local_java_options()


# Two child sessions and a rebuild: about 2 minutes quiet; a CI run beside four other
# loads took 400 s to make the archive (its JVM dumps 170 MB of classes at exit).
@pytest.mark.timeout(1500)
def test_a_made_archive_is_mapped_by_the_next_sessions_jvm(tmp_path):
    archive = str(tmp_path / "cache" / "spark.jsa")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    made = subprocess.run([sys.executable, "-m", "fmq.spark.class_archive", archive],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    assert os.path.getsize(archive) > 1_000_000
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["spark.jsa"]  # no leftover
    used = subprocess.run([sys.executable, "-c", _MAPPED], cwd=ROOT,
                          env={**env, CLASS_ARCHIVE_ENV: archive}, capture_output=True,
                          text=True, timeout=500)
    assert used.returncode == 0, used.stdout[-3000:] + used.stderr[-3000:]
    assert used.stdout.split()[-2:] == ["archive-mapped", "10"], used.stdout[-3000:]
