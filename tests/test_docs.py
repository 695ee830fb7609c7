"""The code examples in README.md and the package docstring run as written."""

from __future__ import annotations

import os
import re

import fmq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_embedded_example_runs(tmp_path, monkeypatch, capsys):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = python_blocks(f.read())
    embedded = next(b for b in blocks if "fmq.Broker.open" in b)
    monkeypatch.chdir(tmp_path)
    exec(compile("import fmq\n" + embedded, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "0 b'{\"id\": 1}'" in out
    with fmq.Broker.open(str(tmp_path / "fmq-data")) as b:
        assert b.stats()["open_transactions"] == 0 and b.stats()["log_end"] > 0


def test_package_docstring_example_runs(tmp_path, monkeypatch):
    example = "\n".join(line[4:] for line in fmq.__doc__.splitlines()
                        if line.startswith("    "))
    example = example.replace('"/var/lib/fmq"', repr(str(tmp_path / "d")))
    namespace: dict = {}
    exec(compile(example, "fmq/__init__.py", "exec"), namespace)
    assert [m.body for m in namespace["messages"]] == [b'{"id": 1}']


def test_demo_command_runs(tmp_path):
    from click.testing import CliRunner
    from fmq.cli.main import cli

    result = CliRunner().invoke(cli, ["demo", "--data-dir", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    assert "in a transaction" in result.stdout and "commit" in result.stdout
