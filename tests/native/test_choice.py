"""Which path runs, and who says so: ``FMQ_NO_EXTENSIONS=1`` gives every pure twin in a fresh
process; a tree without compiled modules runs pure, or refuses to start under
``FMQ_REQUIRE_EXTENSIONS=1``; ``fmq --version``, STATS, ``fmq stats`` and the metrics name
the path of the process that runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fmq
from fmq import native
from tests.ops.test_metrics import scrape, value
from tests.server.harness import free_port, run_cli, server_stats

from .conftest import FAST

ROOT = Path(__file__).resolve().parents[2]
#: Prints the path and the module each chooser picked.
PROBE = (
    "from fmq import native\n"
    "from fmq.log import record\n"
    "from fmq.protocol import _impl, frame\n"
    "print(native.implementation(), record.CODEC_MODULE.__name__,"
    " frame.FRAMING.__name__, _impl.codecs.__name__)\n"
)
PURE = "pure fmq.log.record.codec fmq.protocol.framing fmq.protocol.struct_codecs"
COMPILED = ("compiled fmq.log.record._codec_c fmq.protocol._framing_c "
            "fmq.protocol._struct_codecs_c")


def _env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("FMQ_NO_EXTENSIONS", "FMQ_REQUIRE_EXTENSIONS")}
    return {**env, **changes}


def _run(code: str, env: dict, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _built() -> bool:
    return all(native.load(name) is not None for name in native.COMPILED_MODULES) \
        if not native.no_extensions() else _run(PROBE, _env()).stdout.startswith("compiled")


def test_no_extensions_runs_every_pure_twin() -> None:
    done = _run(PROBE, _env(FMQ_NO_EXTENSIONS="1"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == PURE


def test_without_the_variable_the_compiled_modules_run_where_built() -> None:
    done = _run(PROBE, _env())
    assert done.returncode == 0, done.stderr
    if native.require_extensions():  # CI: they must be there
        assert done.stdout.strip() == COMPILED
    else:
        assert done.stdout.strip() in (PURE, COMPILED)


def test_the_compiled_list_is_the_one_setup_py_builds() -> None:
    import runpy

    setup_py = runpy.run_path(str(ROOT / "setup.py"), run_name="fmq_setup_table")
    assert setup_py["COMPILED"] == native.COMPILED_MODULES
    for name, source in native.COMPILED_MODULES.items():
        assert (ROOT / source).is_file(), (name, source)


def test_every_twin_is_named_after_its_pure_module() -> None:
    """``_<name>_c`` beside ``<name>.py`` (``_record_c`` inside the package it twins)."""
    for name, source in native.COMPILED_MODULES.items():
        package, _, module = name.rpartition(".")
        assert module.startswith("_") and module.endswith("_c"), name
        pure = module[1:-2]
        here = ROOT / package.replace(".", "/")
        assert (here / f"{pure}.py").is_file() or here.name == pure, name
        assert source in (f"{package.replace('.', '/')}/{pure}.py",
                          f"{package.replace('.', '/')}/{module}.pyx"), (name, source)
        if (here / f"{pure}.py").is_file():
            assert native.twin_name(f"{package}.{pure}") == name


def test_choose_refuses_a_module_without_a_twin() -> None:
    import fmq.units

    with pytest.raises(ValueError, match="COMPILED_MODULES"):
        native.choose(fmq.units)


def _tree_without_compiled_modules(tmp_path: Path) -> Path:
    """A copy of the package's source only, as a machine without a C compiler installs it."""
    tree = tmp_path / "tree"
    skip = shutil.ignore_patterns("*.so", "*.pyd", "__pycache__")
    shutil.copytree(ROOT / "fmq", tree / "fmq", ignore=skip)
    shutil.copytree(ROOT / "cli", tree / "fmq" / "cli", ignore=skip)  # installed as fmq.cli
    return tree


def test_a_tree_without_compiled_modules_runs_pure_or_refuses_when_required(tmp_path) -> None:
    tree = _tree_without_compiled_modules(tmp_path)
    code = (f"import fmq; assert fmq.__file__.startswith({str(tree)!r}), fmq.__file__\n"
            + PROBE)
    env = _env(PYTHONPATH=str(tree))
    done = _run(code, env, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == PURE
    code = (
        "try:\n"
        "    import fmq.protocol\n"
        "except ImportError as exc:\n"
        "    from fmq.errors import ExtensionMissing\n"
        "    assert isinstance(exc, ExtensionMissing), type(exc)\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('imported without its compiled modules')\n"
    )
    done = _run(code, {**env, "FMQ_REQUIRE_EXTENSIONS": "1"}, cwd=str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FMQ_REQUIRE_EXTENSIONS=1" in done.stdout and "pip install ." in done.stdout
    cli = subprocess.run([sys.executable, "-m", "fmq.cli.main", "--version"], cwd=str(tmp_path),
                         env={**env, "FMQ_REQUIRE_EXTENSIONS": "1"}, capture_output=True,
                         text=True, timeout=60)
    # Any command: the package refuses to import, and the last line says what to do.
    last = cli.stderr.strip().splitlines()[-1]
    assert cli.returncode == 1 and last.startswith("fmq.errors.input.ExtensionMissing: compiled"
                                                   " module "), cli.stderr
    # Told to run pure, the same tree starts whatever the other variable says.
    done = _run(PROBE, {**env, "FMQ_REQUIRE_EXTENSIONS": "1", "FMQ_NO_EXTENSIONS": "1"},
                cwd=str(tmp_path))
    assert done.returncode == 0 and done.stdout.strip() == PURE, done.stderr


def test_version_names_the_path() -> None:
    for env, path in ((_env(FMQ_NO_EXTENSIONS="1"), "pure"),
                      (_env(), "compiled" if _built() else "pure")):
        done = subprocess.run([sys.executable, "-m", "fmq.cli.main", "--version"], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"fmq, version {fmq.__version__} ({path})"


@pytest.mark.parametrize("pure", [True, False], ids=["pure", "default"])
def test_stats_and_metrics_name_the_path_of_the_server(start_server, monkeypatch, pure) -> None:
    if pure:
        monkeypatch.setenv("FMQ_NO_EXTENSIONS", "1")
    else:
        monkeypatch.delenv("FMQ_NO_EXTENSIONS", raising=False)
    want = "pure" if pure or not _built() else "compiled"
    port = free_port()
    srv = start_server({**FAST, "server": {**FAST["server"], "metrics_port": port}})
    assert server_stats(srv.address)["implementation"] == want
    assert value(scrape(port), "fmq_build_info", version=fmq.__version__, path=want) == 1
    shown = run_cli("stats", "--server", srv.address)
    assert shown.returncode == 0, shown.stderr
    assert f"{fmq.__version__} ({want})" in shown.stdout
