"""A Spark standalone cluster on 127.0.0.1 for the tests that need what local mode does
not do (speculative tasks: Spark speculates only on a cluster): a master and two workers,
real JVMs started with ``spark-class`` from the installed pyspark, one core each. The
workers are named by different host names (``127.0.0.1`` and ``localhost``, both the
loopback address) because Spark never runs a speculative copy on the host of the attempt
it copies."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.server.harness import free_port

#: The host names of the two workers: one machine, two names Spark tells apart.
WORKER_HOSTS = ("127.0.0.1", "localhost")
#: How long the master and the workers may take to start on a loaded machine.
START_S = 120.0


def _spark_class() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def _wait_for(path: str, text: str, count: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            if f.read().count(text) >= count:
                return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    with open(path, errors="replace") as f:
        raise AssertionError(f"{what} did not happen:\n{f.read()[-3000:]}")


@contextmanager
def standalone_cluster(work: str) -> Iterator[str]:
    """The master's URL (``spark://127.0.0.1:PORT``) while the master and both workers
    (1 core, 1 GB each) run; all killed on the way out."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m"}
    port = free_port()
    master_log = os.path.join(work, "master.log")
    procs: list[subprocess.Popen] = []

    def start(args: list[str], log: str, extra_env: dict[str, str]) -> subprocess.Popen:
        with open(log, "w") as out:
            proc = subprocess.Popen([_spark_class(), *args], stdout=out,
                                    stderr=subprocess.STDOUT, env={**env, **extra_env},
                                    start_new_session=True)
        procs.append(proc)
        return proc

    try:
        master = start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(port), "--webui-port", str(free_port())],
                       master_log, {})
        _wait_for(master_log, "I have been elected leader", 1, master, "the master's start")
        url = f"spark://127.0.0.1:{port}"
        for i, host in enumerate(WORKER_HOSTS):
            work_dir = os.path.join(work, f"worker-{i}")
            os.makedirs(work_dir)
            start(["org.apache.spark.deploy.worker.Worker", "--host", host, "--cores", "1",
                   "--memory", "1g", "--webui-port", str(free_port()), "--work-dir",
                   work_dir, url], os.path.join(work, f"worker-{i}.log"),
                  {"SPARK_LOCAL_HOSTNAME": host})
        _wait_for(master_log, "Registering worker", len(WORKER_HOSTS), master,
                  "both workers' registration")
        yield url
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(30)
