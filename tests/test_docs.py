"""The code examples in README.md and the package docstring run as written."""

from __future__ import annotations

import os
import re

import fmq
from tests.doc_blocks import doc_blocks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_blocks(doc: str) -> list[str]:
    return [b.code for b in doc_blocks(doc) if b.lang == "python"]


def test_readme_embedded_example_runs(tmp_path, monkeypatch, capsys):
    blocks = python_blocks("README.md")
    embedded = next(b for b in blocks if "fmq.Broker.open" in b)
    monkeypatch.chdir(tmp_path)
    assert "import fmq" in embedded  # runs as pasted, not only after our own import
    exec(compile(embedded, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "0 b'{\"id\": 1}'" in out
    assert not (tmp_path / "fmq-data").exists()  # the running server's directory
    with fmq.Broker.open(str(tmp_path / "embedded-data")) as b:
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


def test_readme_consumer_resumes_where_it_committed():
    consumer = next(b for b in python_blocks("README.md") if "Consumer(" in b and "commit()" in b)
    assert 'start="committed"' in consumer and 'start="earliest"' not in consumer


def test_readme_set_up_commands_use_a_virtual_environment():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    quick_start = text[text.index("## Quick start"):text.index("## Using it")]
    commands = re.findall(r"```bash\n(.*?)```", quick_start, flags=re.S)
    assert len(commands) == 2 and all(c.count("\n") == 1 for c in commands)
    assert all(c.startswith("python3 -m venv .venv && . .venv/bin/activate && ")
               for c in commands)
    assert commands[0].rstrip().endswith("pip install . && fmq server")
    assert commands[1].rstrip().endswith('pip install -e ".[test]" && python -m pytest')


def test_docs_cite_nothing_outside_the_repository():
    for name in ["README.md", *(f"docs/{n}" for n in os.listdir(os.path.join(ROOT, "docs"))
                                if n.endswith(".md"))]:
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            text = f.read()
        assert "../shared" not in text and not re.search(r"\bseed \d", text), name


def _text(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def test_readme_says_what_coordinator_needs_installed():
    # etcd3gw is an extra: without it `fmq server --coordinator` refuses to start.
    rows = [line for line in _text("README.md").splitlines()
            if line.startswith("|") and "--coordinator" in line]
    assert rows and all("fmq[replication]" in row for row in rows), rows


def test_security_md_says_how_the_first_offline_user_add_finds_its_directory():
    text = _text("docs/security.md")
    section = text[text.index("### Adding users"):text.index("fmq user add admin ./fmq-data")]
    # The first command of the section needs a directory a broker made: say how to get one.
    assert "fmq server --data-dir ./fmq-data" in section, section


def test_replication_md_does_not_call_cluster_users_per_node():
    text = " ".join(_text("docs/replication.md").split())
    assert "Users and access rules are per node (" not in text
    assert "share the cluster's users and rules" in text
