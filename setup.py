"""The optional compiled twins of FMQ's hot modules (everything else is in pyproject.toml).

The twins are listed once, in ``fmq.native.COMPILED_MODULES``: each ``_<name>_c`` is the
plain Python module ``<name>.py`` beside it compiled by Cython 3, so the pure module stays
importable as its reference (``fmq.native.choose`` picks at import time), or a ``.pyx`` file
written in Cython itself (bytes read and written in C) beside the pure functions it must
equal. The extensions are optional: without a C compiler
``pip install .`` warns and installs the pure package, which runs the same, only slower.
``FMQ_REQUIRE_EXTENSIONS=1`` at build time makes a failed build an error instead.
"""

from __future__ import annotations

import ast
import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def compiled_modules() -> dict[str, str]:
    """fmq/native.py's ``COMPILED_MODULES`` (compiled module -> the source Cython compiles),
    the one list of the twins, read without importing fmq: a build from a clean checkout
    has none of fmq's dependencies installed."""
    tree = ast.parse((HERE / "fmq" / "native.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id == "COMPILED_MODULES"):
            return ast.literal_eval(node.value)
    raise SystemExit("fmq/native.py defines no COMPILED_MODULES: the twins cannot be built")


COMPILED = compiled_modules()
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
