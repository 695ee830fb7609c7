"""A real, small tmpfs for the disk-full tests (mounting needs root; otherwise they skip)."""

from __future__ import annotations

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
