"""The optional compiled twins of FMQ's hot modules (everything else is in pyproject.toml).

Each module in ``COMPILED`` is a plain Python module of the package compiled by Cython 3
under a name of its own, so the pure module stays importable beside it as its reference
(``fmq.native`` chooses at import time). Two are written in Cython itself
(``_record_c.pyx``, ``_item_batch_c.pyx``: bytes read and written in C), beside the pure
functions they must equal. The extensions are optional: without a C compiler
``pip install .`` warns and installs the pure package, which runs the same, only slower.
``FMQ_REQUIRE_EXTENSIONS=1`` at build time makes a failed build an error instead.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
#: compiled module -> the pure module it is compiled from (fmq/native.py lists the same).
COMPILED = {
    "fmq.log.record._codec_c": "fmq/log/record/codec.py",
    "fmq.log.record._marks_c": "fmq/log/record/marks.py",
    "fmq.log.record._record_c": "fmq/log/record/_record_c.pyx",
    "fmq.protocol._frame_c": "fmq/protocol/framing.py",
    "fmq.protocol._message_requests_c": "fmq/protocol/_message_requests_c.pyx",
    "fmq.engine._queue_placement_c": "fmq/engine/queue_placement.py",
    "fmq.index._derive_c": "fmq/index/derive.py",
    # Written in Cython itself (C byte packing); its pure twin is fmq/index/item_batch.py.
    "fmq.index._item_batch_c": "fmq/index/_item_batch_c.pyx",
    "fmq.protocol._struct_codecs_c": "fmq/protocol/struct_codecs.py",
}
#: The Cython sources: copies of the pure modules under their compiled names.
SOURCE_DIR = HERE / "build" / "cython-src"
REQUIRED = os.environ.get("FMQ_REQUIRE_EXTENSIONS", "") == "1"
DIRECTIVES = {
    "language_level": 3,
    # Annotations stay documentation: typing by them would make a compiled function refuse
    # a wrong type with another error than its pure twin gives.
    "annotation_typing": False,
    "binding": True,
}


def _warn(text: str) -> None:
    print(f"*** fmq: {text}", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """Builds each extension, and for an optional one turns any failure (no compiler, no
    Python headers, a compiler error) into a warning: its pure module runs instead."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:  # one C compiler per core: the codecs are large C files
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all is found before any extension
            if REQUIRED:
                raise
            _warn(f"no extension compiled ({exc}): the pure-Python package only (slower)")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            if not ext.optional:
                raise
            _warn(f"{ext.name} not compiled ({exc}): its pure twin runs instead (slower)")


def extensions() -> list[Extension]:
    if os.environ.get("FMQ_NO_EXTENSIONS", "") == "1" and not REQUIRED:
        _warn("FMQ_NO_EXTENSIONS=1: building the pure-Python package only")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        if REQUIRED:
            raise
        _warn("Cython is not installed: the pure-Python package only (slower)")
        return []
    modules = []
    for name, source in COMPILED.items():
        target = SOURCE_DIR / (name.replace(".", "/") + Path(source).suffix)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HERE / source, target)
        modules.append(Extension(name, [str(target.relative_to(HERE))], optional=not REQUIRED))
    return cythonize(modules, compiler_directives=DIRECTIVES, quiet=True,
                     nthreads=os.cpu_count() or 1,
                     build_dir=str((HERE / "build" / "cython-c").relative_to(HERE)))


if __name__ == "__main__":
    setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
