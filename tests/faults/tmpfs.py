"""A real, small tmpfs for the disk-full tests (mounting needs root; otherwise they skip)."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(where: Path, size: str, purpose: str) -> Iterator[str]:
    """Mount a tmpfs of ``size`` (e.g. ``"1m"``) at the new directory ``where`` for the
    duration; skip the test, naming ``purpose``, when it cannot be mounted."""
    where.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs for {purpose} (needs root): "
                    f"{res.stderr.strip()}")
    try:
        yield str(where)
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill_up(path: str) -> None:
    """Create ``path`` and write zeros to it until its file system is full. Unbuffered, in
    ever smaller pieces, so that no byte stays free: a buffered file's partial last write
    left bytes in its buffer, and its close raised ENOSPC again."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for size in (1 << 16, 4096, 512, 1):
            chunk = bytes(size)
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
