"""The operating system's name of the calling thread (``/proc/PID/task/TID/comm`` on Linux),
so that ``top -H``, ``perf`` and ``bench/threads_profile.py`` tell FMQ's threads apart:
Python before 3.14 names its threads only for itself."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

_PR_SET_NAME = 15  # <linux/prctl.h>
_libc: ctypes.CDLL | None = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:  # no C library to call: threads keep the process's name
        _libc = None


def name_os_thread(name: str | None = None) -> None:
    """Give the calling thread ``name`` (its Python name by default) at the operating
    system's level too; the kernel keeps the first 15 bytes. Never call it on the main
    thread: that would rename the process in ``ps``."""
    if _libc is None or threading.current_thread() is threading.main_thread():
        return
    text = (name or threading.current_thread().name).encode("utf-8", "replace")[:15]
    _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(text), 0, 0, 0)


def name_os_process(name: str) -> None:
    """Give the calling process's main thread ``name`` at the operating system's level (what
    ``ps -o comm``, ``top`` and ``/proc/PID/comm`` show): for FMQ's own child processes,
    which would otherwise show as the interpreter. The kernel keeps the first 15 bytes."""
    if _libc is None:
        return
    _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode("utf-8", "replace")[:15]), 0, 0, 0)
