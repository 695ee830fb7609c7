"""Which implementation of the hot path runs: the compiled modules or their pure twins.

``pip install .`` compiles a few pure-Python modules with Cython into extension modules
(setup.py, ``COMPILED_MODULES`` below); a machine without a C compiler installs the pure
ones only. Every package that has a compiled twin asks :func:`load` for it, and this module
alone reads the two environment variables:

* ``FMQ_NO_EXTENSIONS=1``: the pure twins, even where the compiled ones are installed (to
  compare the two, or to rule the compiled ones out);
* ``FMQ_REQUIRE_EXTENSIONS=1``: a compiled module that is not installed is an error
  (:class:`~fmq.errors.ExtensionMissing`) instead of a silent fall-back, so a CI run can
  never test the pure path only while believing it tests both.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from fmq.errors import ExtensionMissing

#: The compiled modules setup.py builds (name -> the pure module it is compiled from).
COMPILED_MODULES: dict[str, str] = {
    "fmq.log.record._codec_c": "fmq/log/record/codec.py",
    "fmq.log.record._marks_c": "fmq/log/record/marks.py",
    "fmq.log.record._record_c": "fmq/log/record/_record_c.pyx",
    "fmq.protocol._frame_c": "fmq/protocol/framing.py",
    "fmq.protocol._message_requests_c": "fmq/protocol/_message_requests_c.pyx",
    "fmq.engine._queue_placement_c": "fmq/engine/queue_placement.py",
    "fmq.index._derive_c": "fmq/index/derive.py",
    "fmq.index._item_batch_c": "fmq/index/_item_batch_c.pyx",
    "fmq.protocol._struct_codecs_c": "fmq/protocol/struct_codecs.py",
}


def no_extensions() -> bool:
    """``FMQ_NO_EXTENSIONS=1``: every pure twin."""
    return os.environ.get("FMQ_NO_EXTENSIONS", "") == "1"


def require_extensions() -> bool:
    """``FMQ_REQUIRE_EXTENSIONS=1``: a missing compiled module is an error."""
    return os.environ.get("FMQ_REQUIRE_EXTENSIONS", "") == "1"


def load(name: str) -> ModuleType | None:
    """The compiled module ``name``, or None when the pure twin is to run (forced by
    ``FMQ_NO_EXTENSIONS=1``, or the module is not installed and not required)."""
    if no_extensions():
        return None
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if require_extensions():
            raise ExtensionMissing(
                f"compiled module {name} is not installed ({exc}) and FMQ_REQUIRE_EXTENSIONS=1 "
                "is set: install a C compiler and the Python headers (Debian/Ubuntu: "
                "apt install build-essential python3-dev), then reinstall FMQ with `pip "
                "install .`; or unset FMQ_REQUIRE_EXTENSIONS to run the pure-Python path"
            ) from exc
        return None


def implementation() -> str:
    """``"compiled"`` when every compiled module runs, else ``"pure"`` (what ``fmq
    --version``, ``fmq stats`` and the metrics report)."""
    if all(load(name) is not None for name in COMPILED_MODULES):
        return "compiled"
    return "pure"
