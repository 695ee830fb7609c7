"""Which implementation of the hot path runs: the compiled twins or their pure modules.

Every compiled module is a twin named ``_<name>_c`` beside the pure ``<name>.py`` it must
equal (as aiohttp's ``HttpRequestParserC`` beside ``HttpRequestParserPy``): the pure module
compiled as it is by Cython, or, where the twin is a ``.pyx`` file, written in Cython itself.
``_record_c.pyx`` is the one twin of a package (``fmq.log.record``: its codec's
``encode_into`` and ``decode_at`` and the runs of ``runs.py``), so it lies inside it.
:data:`COMPILED_MODULES` is the one list of them: setup.py reads it (without importing fmq)
to build them, and ``fmq --version`` and CI check them. ``pip install .`` compiles them; a
machine without a C compiler installs the pure modules only.

:func:`choose` is the one place a pure module or its twin is picked (the module that uses it
names both: ``native.choose(framing)`` is ``fmq.protocol._framing_c`` or ``framing``), and
this module alone reads the two environment variables:

* ``FMQ_NO_EXTENSIONS=1``: the pure modules, even where the compiled ones are installed (to
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

#: Every compiled twin setup.py builds: its module -> the source Cython compiles (a pure
#: module, or the twin's own ``.pyx``). setup.py reads this literal with ``ast``: keep it
#: plain strings.
COMPILED_MODULES: dict[str, str] = {
    "fmq.log.record._codec_c": "fmq/log/record/codec.py",
    "fmq.log.record._record_c": "fmq/log/record/_record_c.pyx",
    "fmq.log._write_sync_c": "fmq/log/_write_sync_c.pyx",
    "fmq.log._flusher_c": "fmq/log/_flusher_c.pyx",
    "fmq.protocol._framing_c": "fmq/protocol/_framing_c.pyx",
    "fmq.protocol._message_requests_c": "fmq/protocol/_message_requests_c.pyx",
    "fmq.protocol._struct_codecs_c": "fmq/protocol/struct_codecs.py",
    "fmq.engine._queue_placement_c": "fmq/engine/queue_placement.py",
    "fmq.tx._open_transaction_c": "fmq/tx/_open_transaction_c.pyx",
    "fmq.tx._writer_c": "fmq/tx/writer.py",
    "fmq.index._derive_c": "fmq/index/derive.py",
    "fmq.index._item_batch_c": "fmq/index/_item_batch_c.pyx",
    "fmq.index._batch_puts_c": "fmq/index/_batch_puts_c.pyx",
    "fmq.server.net._answer_send_c": "fmq/server/net/_answer_send_c.pyx",
    "fmq.server.net._plain_sends_c": "fmq/server/net/_plain_sends_c.pyx",
    "fmq.server.kafka._record_messages_c": "fmq/server/kafka/_record_messages_c.pyx",
    "fmq.server.kafka._stored_batches_c": "fmq/server/kafka/_stored_batches_c.pyx",
    "fmq.server.ops._pull_messages_c": "fmq/server/ops/_pull_messages_c.pyx",
}


def twin_name(pure: str) -> str:
    """The compiled twin's module name of the pure module ``pure``: ``a.b.name`` ->
    ``a.b._name_c``."""
    package, _, name = pure.rpartition(".")
    return f"{package}._{name}_c"


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


def compiled_twin(pure: str) -> ModuleType | None:
    """The compiled twin of the pure module named ``pure``, or None when the pure one is to
    run (see :func:`load`)."""
    name = twin_name(pure)
    if name not in COMPILED_MODULES:
        raise ValueError(f"{pure} has no compiled twin in fmq.native.COMPILED_MODULES")
    return load(name)


def choose(pure: ModuleType) -> ModuleType:
    """``pure``'s compiled twin ``_<name>_c`` where it runs, else ``pure`` itself."""
    return compiled_twin(pure.__name__) or pure


def implementation() -> str:
    """``"compiled"`` when every compiled module runs, else ``"pure"`` (what ``fmq
    --version``, ``fmq stats`` and the metrics report)."""
    if all(load(name) is not None for name in COMPILED_MODULES):
        return "compiled"
    return "pure"
