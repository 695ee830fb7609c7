"""The root of the FMQ exception tree (the package doc, :mod:`fmq.errors`, explains its
fields)."""

from __future__ import annotations

from typing import ClassVar


class FMQError(Exception):
    """Root of every error FMQ raises on purpose."""

    code = 1
    retriable = False
    #: The fields this class carries, with the type each is rebuilt as from its text.
    fields: ClassVar[dict[str, type]] = {}
    #: The message, with a ``{field}`` placeholder for every field (classes with fields).
    message_format = ""
