"""The flusher thread, the compiled one (``fmq.log._flusher_c``: its loop runs without the
interpreter lock) and its pure twin (``fmq.log.flusher``), on real files: the same bytes at
the same place, the same errors, the eventfd signalled once per job; one job at a time; a
close waits for the job under way; and the compiled one ends a job while another thread
holds the interpreter lock, which the pure one cannot."""

from __future__ import annotations

import errno
import os
import select
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.log import flusher as pure
from tests.log.written_files import file_after
from tests.native.twins import compiled


@pytest.fixture(scope="module")
def c_flusher():
    return compiled("fmq.log._flusher_c").Flusher


@pytest.fixture(scope="module")
def flushers(c_flusher):
    made = {"pure": pure.Flusher("test-flusher-py"), "compiled": c_flusher("test-flusher-c")}
    yield made
    for f in made.values():
        f.close()


def _signalled(flusher, timeout: float = 10.0) -> int:
    """Wait for the eventfd and drain it: the count it held."""
    ready, _, _ = select.select([flusher.fileno], [], [], timeout)
    assert ready, "the eventfd was not signalled"
    return os.eventfd_read(flusher.fileno)


def _run(flusher, fd: int, data, position: int) -> OSError | None:
    flusher.start(fd, data, position)
    assert _signalled(flusher) == 1
    assert flusher.done()
    return flusher.outcome()


def _file_after(flusher, path: str, prefill: bytes, data, position: int) -> bytes:
    def write(fd: int, data, position: int) -> None:
        assert _run(flusher, fd, data, position) is None

    return file_after(write, path, prefill, data, position)


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=200_000), position=st.integers(0, 70_000),
       prefill=st.binary(max_size=5_000), kind=st.sampled_from([bytes, bytearray]))
def test_both_leave_the_same_file(flushers, tmp_path_factory, data, position, prefill, kind):
    where = tmp_path_factory.mktemp("flush")
    files = {name: _file_after(f, str(where / name), prefill, kind(data), position)
             for name, f in flushers.items()}
    assert files["pure"] == files["compiled"]
    assert files["pure"][position:position + len(data)] == data


def test_both_fail_alike_on_a_descriptor_that_refuses_writes(flushers, tmp_path):
    path = tmp_path / "ro"
    path.write_bytes(b"before")
    errors = {}
    for name, f in flushers.items():
        fd = os.open(path, os.O_RDONLY)
        try:
            errors[name] = _run(f, fd, b"not written", 0)
        finally:
            os.close(fd)
    assert all(isinstance(e, OSError) for e in errors.values())
    assert {(e.errno, e.strerror) for e in errors.values()} == {
        (errno.EBADF, os.strerror(errno.EBADF))}
    assert path.read_bytes() == b"before"


def test_one_job_at_a_time_and_its_outcome_only_once_ended(flushers, tmp_path):
    for name, f in flushers.items():
        fd = os.open(tmp_path / name, os.O_RDWR | os.O_CREAT)
        try:
            with pytest.raises(RuntimeError, match="no flush has ended"):
                f.outcome()
            assert not f.busy()
            f.start(fd, b"one", 0)
            assert f.busy()
            with pytest.raises(RuntimeError, match="under way"):
                f.start(fd, b"two", 0)
            assert f.wait() is None  # wait() takes the outcome
            assert not f.busy() and _signalled(f) == 1
        finally:
            os.close(fd)
        assert (tmp_path / name).read_bytes() == b"one"


@pytest.mark.parametrize("kind", ["pure", "compiled"])
def test_close_waits_for_the_job_under_way(c_flusher, tmp_path, kind):
    f = pure.Flusher() if kind == "pure" else c_flusher()
    fd = os.open(tmp_path / "closing", os.O_RDWR | os.O_CREAT)
    data = os.urandom(4 << 20)
    try:
        f.start(fd, data, 0)
        f.close()
        assert f.done()
        assert f.outcome() is None
    finally:
        os.close(fd)
    assert (tmp_path / "closing").read_bytes() == data
    with pytest.raises(RuntimeError):
        f.start(-1, b"", 0)


def test_the_compiled_flusher_ends_a_job_while_another_thread_holds_the_interpreter_lock(
        c_flusher, tmp_path):
    """The main thread spins without releasing the interpreter lock (a switch interval
    longer than the spin): the compiled flusher still writes, syncs and signals; the pure
    one needs the lock to take the job, so it cannot."""
    f = c_flusher()
    fd = os.open(tmp_path / "held", os.O_RDWR | os.O_CREAT)
    interval = sys.getswitchinterval()
    try:
        assert _run(f, fd, b"warm-up", 0) is None  # the thread waits in its nogil loop
        before = f.ended_ns
        sys.setswitchinterval(30.0)
        f.start(fd, b"while held", 0)
        deadline = time.monotonic() + 10
        while f.ended_ns == before and time.monotonic() < deadline:
            pass  # no call here releases the interpreter lock
        ended = f.ended_ns
    finally:
        sys.setswitchinterval(interval)
    try:
        assert ended != before, "the flush waited for the interpreter lock"
        assert _signalled(f) == 1 and f.outcome() is None
    finally:
        os.close(fd)
        f.close()
    assert (tmp_path / "held").read_bytes() == b"while held"
