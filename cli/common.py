"""Helpers shared by the command modules: output, errors, opening a stopped broker's dir."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import click

from fmq.errors import FMQError


def emit(obj: Any, as_json: bool, text: str | None = None) -> None:
    """One JSON object per line with --json, else the human text."""
    if as_json:
        click.echo(json.dumps(obj, sort_keys=True, default=str))
    else:
        click.echo(text if text is not None else str(obj))


def fmq_errors(fn: Callable) -> Callable:
    """Turn FMQ errors into a one-line message and exit status 1 (no traceback)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except FMQError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)

    return wrapper


data_dir_argument = click.argument(
    "data_dir", type=click.Path(exists=True, file_okay=False, dir_okay=True)
)
json_option = click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
