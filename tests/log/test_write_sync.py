"""``write_then_sync``, the compiled one (``fmq.log._write_sync_c``: the write and the
fdatasync in one release of the interpreter lock) and its pure twin (``fmq.log.write_sync``),
on real files: the same bytes at the same place, the same errors; and the group commit's
usual flush through it, while an I/O that changes a step still sees each step in order."""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fmq
from fmq.log import write_sync
from fmq.log.fileio import FileIO
from fmq.message import Message
from tests.log.written_files import file_after
from tests.native.twins import compiled, outcome


@pytest.fixture(scope="module")
def c_write():
    return compiled("fmq.log._write_sync_c").write_then_sync


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=200_000), position=st.integers(0, 70_000),
       prefill=st.binary(max_size=3_000), kind=st.sampled_from(["bytes", "bytearray", "view"]))
def test_both_leave_the_same_file(tmp_path_factory, c_write, data, position, prefill, kind):
    given_data = {"bytes": data, "bytearray": bytearray(data),
                  "view": memoryview(bytearray(data))}[kind]
    base = tmp_path_factory.mktemp("ws")
    pure = file_after(write_sync.write_then_sync, str(base / "pure"), prefill, given_data,
                       position)
    fast = file_after(c_write, str(base / "c"), prefill, given_data, position)
    assert fast == pure
    expected = bytearray(prefill)
    if data:  # an empty write does not extend the file
        expected = expected.ljust(position, b"\0")
        expected[position:position + len(data)] = data
    assert pure == bytes(expected)


def _closed_fd(tmp_path) -> int:
    fd = os.open(str(tmp_path / "gone"), os.O_RDWR | os.O_CREAT)
    os.close(fd)
    return fd


@pytest.mark.parametrize("how", ["closed", "read-only", "pipe", "not a buffer"])
def test_both_fail_alike(tmp_path, c_write, how):
    fds = []
    if how == "closed":
        fd, data = _closed_fd(tmp_path), b"x" * 10
    elif how == "read-only":
        (tmp_path / "ro").write_bytes(b"")
        fd, data = os.open(str(tmp_path / "ro"), os.O_RDONLY), b"x" * 10
        fds.append(fd)
    elif how == "pipe":
        r, fd = os.pipe()
        fds += [r, fd]
        data = b"x" * 10
    else:
        fd = os.open(str(tmp_path / "f"), os.O_RDWR | os.O_CREAT)
        fds.append(fd)
        data = 12345
    try:
        pure = outcome(write_sync.write_then_sync, fd, data, 0)
        fast = outcome(c_write, fd, data, 0)
    finally:
        for f in fds:
            os.close(f)
    assert pure[0] == fast[0] == "raised"
    if how != "not a buffer":
        assert pure == fast
        expected = {"closed": errno.EBADF, "read-only": errno.EBADF,
                    "pipe": errno.ESPIPE}[how]
        assert os.strerror(expected) in fast[2]


class RecordingIO(FileIO):
    """Counts the steps a test's I/O sees (as the crash and failure tests' I/O does)."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def pwrite(self, fd, data, position):
        self.steps.append("pwrite")
        return super().pwrite(fd, data, position)

    def fdatasync(self, fd):
        self.steps.append("fdatasync")
        super().fdatasync(fd)


def _sends_then_reads(path: str, io: FileIO) -> tuple[list, list[bytes]]:
    config = fmq.BrokerConfig(queues_per_topic=1)
    with fmq.Broker.open(path, config, io=io) as broker:
        results = [broker.send(Message("ws", f"body {i}".encode() * 30)) for i in range(20)]
    with fmq.Broker.open(path, config) as broker:  # reopened: what the log holds
        bodies = [m.body for m in broker.reads.pull("ws", 0, 0, max_messages=100)]
    return results, bodies


def test_a_flush_through_the_one_call_is_durable_and_read_back(tmp_path):
    results, bodies = _sends_then_reads(str(tmp_path / "plain"), FileIO())
    assert len(results) == 20
    assert bodies == [f"body {i}".encode() * 30 for i in range(20)]


def test_an_io_that_changes_a_step_sees_every_write_then_its_sync(tmp_path):
    """The crash, failure and power-cut tests count and break pwrite and fdatasync: a
    subclass that changes either still gets both, the write first."""
    io = RecordingIO()
    _results, bodies = _sends_then_reads(str(tmp_path / "recorded"), io)
    assert len(bodies) == 20
    flushes = [i for i, step in enumerate(io.steps) if step == "fdatasync"]
    assert len(flushes) >= 20  # each send waits for its own flush here
    for at in flushes:
        assert "pwrite" in io.steps[:at]
