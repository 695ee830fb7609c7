"""A real etcd, broker groups registered in it, and the ``fmq`` command run in-process."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest
from click.testing import CliRunner
from fmq.cli.main import cli

from fmq.coordination.lease import LeaderLease
from fmq.coordination.routes import ClusterRoutes
from tests.etcdkit import ETCD, EtcdProcess
from tests.server.harness import free_port

CLUSTER = "c1"
NEEDS_ETCD = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")


@pytest.fixture
def etcd(tmp_path):
    server = EtcdProcess(str(tmp_path / "etcd")).start()
    yield server
    server.stop()


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict:
        return json.loads(self.stdout)


def fmq(*args: str) -> Run:
    """``fmq ARGS`` in this process (the command line's own parsing and error handling)."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return Run(result.exit_code, result.stdout, result.stderr)


def registered_group(etcd: EtcdProcess, routes: ClusterRoutes, group: str,
                     primary: str | None) -> None:
    """``group`` registered in the cluster; with ``primary``, a leader holding the group's
    real lease (long enough for one test) at that address."""
    routes.register_group(group)
    if primary is not None:
        lease = LeaderLease(etcd.url, group, "n1", primary, ttl_s=120)
        assert lease.try_acquire() is not None


def unused_address() -> str:
    """An address on 127.0.0.1 where nothing listens (a primary that cannot be asked)."""
    return f"127.0.0.1:{free_port()}"
