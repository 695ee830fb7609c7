"""Helpers shared by the command modules: output, errors, the data-directory parameter."""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from functools import wraps
from typing import Any, NoReturn

import click

from fmq.datadir import require_data_dir
from fmq.errors import FMQError

#: What to do about an OSError on a path the user gave, by errno.
_OS_ERROR_HINTS = {
    errno.EACCES: "the user running fmq needs read and write access there; fix the "
                  "permissions or choose another directory",
    errno.EPERM: "the user running fmq needs read and write access there; fix the "
                 "permissions or choose another directory",
    errno.EROFS: "the file system is read-only; choose another directory",
    errno.ENOTDIR: "a part of that path is a file, not a directory; choose another path",
    errno.EEXIST: "a file of that name is in the way; choose another path",
    errno.ENOSPC: "the disk is full; free space or choose another disk",
    errno.ENOENT: "it does not exist; check the path",
}


def emit(obj: Any, as_json: bool, text: str | None = None) -> None:
    """One JSON object per line with --json, else the human text."""
    if as_json:
        click.echo(json.dumps(obj, sort_keys=True, default=str))
    else:
        click.echo(text if text is not None else str(obj))


def json_requested() -> bool:
    """Whether the command running was given ``--json`` (its errors are JSON too)."""
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if ctx.params.get("as_json"):
            return True
        ctx = ctx.parent
    return False


def print_error(message: str, kind: str, as_json: bool) -> None:
    """An error on stderr: ``error: message``, or with ``--json`` one JSON object
    ``{"error": message, "type": kind}`` (``kind``: the FMQ error's class name,
    ``UsageError`` for a mistaken command line, ``error`` otherwise)."""
    if as_json:
        click.echo(json.dumps({"error": message, "type": kind}, sort_keys=True), err=True)
    else:
        click.echo(f"error: {message}", err=True)


def fail(message: str, status: int = 1, kind: str = "error") -> NoReturn:
    """Print the error on stderr (JSON with ``--json``) and exit with ``status`` (no
    traceback)."""
    print_error(message, kind, json_requested())
    sys.exit(status)


def describe_os_error(exc: OSError) -> str:
    """One line for an OSError on a user's path: what failed, where, and what to do."""
    where = f": {exc.filename}" if exc.filename else ""
    hint = _OS_ERROR_HINTS.get(exc.errno or 0)
    return f"{exc.strerror or exc}{where}" + (f" ({hint})" if hint else "")


def fmq_errors(fn: Callable) -> Callable:
    """Turn FMQ errors and OS errors on the user's paths into a one-line message and exit
    status 1 (no traceback)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except FMQError as exc:
            fail(str(exc), kind=type(exc).__name__)
        except BrokenPipeError:  # `fmq ... | head`: the reader left; nothing to say
            # Point stdout at /dev/null so that the flush at exit does not fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except OSError as exc:
            fail(describe_os_error(exc))

    return wrapper


def _merge_data_dir(positional: str | None, option: str | None) -> str | None:
    if positional is not None and option is not None and positional != option:
        raise click.UsageError(f"two data directories given ({positional} and --data-dir "
                               f"{option}); give one")
    return positional if positional is not None else option


def _data_dir_params(required: bool) -> Callable[[Callable], Callable]:
    """DATA_DIR as a positional argument or as ``--data-dir`` (both are accepted everywhere);
    the command gets it as ``data_dir``, checked to be an FMQ data directory."""

    def decorate(fn: Callable) -> Callable:
        @wraps(fn)
        def wrapper(*args: Any, data_dir_arg: str | None = None,
                    data_dir_opt: str | None = None, **kwargs: Any) -> Any:
            data_dir = _merge_data_dir(data_dir_arg, data_dir_opt)
            if data_dir is None and required:
                raise click.UsageError("give the data directory: DATA_DIR or --data-dir DIR")
            if data_dir is not None:
                try:
                    require_data_dir(data_dir)
                except FMQError as exc:
                    fail(str(exc))
            return fn(*args, data_dir=data_dir, **kwargs)

        path = click.Path(exists=True, file_okay=False, dir_okay=True)
        wrapper = click.option("--data-dir", "data_dir_opt", type=path, default=None,
                               help="The data directory (the same as DATA_DIR).")(wrapper)
        return click.argument("data_dir_arg", metavar="DATA_DIR" if required else "[DATA_DIR]",
                              type=path, required=False)(wrapper)

    return decorate


#: An existing FMQ data directory, positional or ``--data-dir`` (offline tools).
data_dir_argument = _data_dir_params(required=True)
#: The same, optional (commands that can ask a server instead).
optional_data_dir_argument = _data_dir_params(required=False)

def data_dir_to_create(default: str | None, help_text: str) -> Callable[[Callable], Callable]:
    """DATA_DIR or ``--data-dir`` for commands that create the directory when missing
    (``server``, ``demo``); the command gets ``data_dir`` (``default`` when neither is
    given)."""

    def decorate(fn: Callable) -> Callable:
        @wraps(fn)
        def wrapper(*args: Any, data_dir_arg: str | None = None,
                    data_dir_opt: str | None = None, **kwargs: Any) -> Any:
            data_dir = _merge_data_dir(data_dir_arg, data_dir_opt)
            return fn(*args, data_dir=default if data_dir is None else data_dir, **kwargs)

        path = click.Path(file_okay=False, dir_okay=True)
        shown = f" [default: {default}]" if default else ""
        wrapper = click.option("--data-dir", "data_dir_opt", type=path, default=None,
                               help=help_text + shown)(wrapper)
        return click.argument("data_dir_arg", metavar="[DATA_DIR]", type=path,
                              required=False)(wrapper)

    return decorate


#: The rule every option that takes a point in time states in its help.
TIME_HELP = ("ms since the epoch, or an ISO-8601 date and time; one without a zone is UTC "
             "(2026-11-23, 2026-11-23T04:00:00, 2026-11-23T05:00:00+01:00)")


def parse_time_ms(text: str, option: str) -> int:
    """A point in time an operator typed, as ms since the epoch: digits are ms since the
    epoch; otherwise an ISO-8601 date or date and time, UTC unless it names a zone. The
    same rule for every option (``option`` names it in the error)."""
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither ms since the epoch nor an ISO-8601 "
                                 f"date and time like 2026-11-23T04:00:00 (UTC unless it "
                                 f"names a zone)", param_hint=option) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return round(when.timestamp() * 1000)


json_option = click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
