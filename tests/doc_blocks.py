"""The ```python and ```bash blocks of README.md and docs/*.md, and how one runs as written.

``run_block`` runs a block in a directory (its relative paths land there) against a server
address (the documented 127.0.0.1:9876, localhost:9876 and 127.0.0.1:7070 become it) and
its Kafka port (the documented 127.0.0.1:9092 becomes it): a python block is exec'd as it
stands; a bash block runs command by command through ``bash -c`` with this environment's
``fmq`` first on PATH and FMQ_SERVER set.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
ADDRESS = re.compile(r"\b(127\.0\.0\.1|localhost):(9876|7070)\b")
#: The documented Kafka address (``--kafka-port 9092``).
KAFKA_ADDRESS = re.compile(r"\b127\.0\.0\.1:9092\b")


def uses_kafka(block: Block) -> bool:
    """Whether ``block`` talks to the documented Kafka port."""
    return KAFKA_ADDRESS.search(block.code) is not None


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence
    lang: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


def doc_blocks(doc: str) -> list[Block]:
    """The python and bash blocks of ``doc`` (a path relative to the repository root)."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    # A block may be indented (inside a list item): its fences and lines alike.
    return [Block(doc, text.count("\n", 0, m.start()) + 1, m.group(1),
                  textwrap.dedent(m.group(2)))
            for m in re.finditer(r"^[ \t]*```(python|bash)\n(.*?)^[ \t]*```", text,
                                 re.S | re.M)]


def find_block(doc: str, snippet: str) -> Block:
    """The one block of ``doc`` that contains ``snippet``."""
    found = [b for b in doc_blocks(doc) if snippet in b.code]
    assert len(found) == 1, f"{len(found)} blocks of {doc} contain {snippet!r}"
    return found[0]


def bash_commands(code: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, comment lines dropped."""
    joined = code.replace("\\\n", " ")
    return [line for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


#: The longest a python block run in a process of its own may take (a Spark session).
OWN_PROCESS_TIMEOUT_S = 800


def run_block(block: Block, cwd: Path, address: str | None, kafka: str | None = None,
              env: dict[str, str] | None = None, own_process: bool = False) -> None:
    """Run ``block`` in ``cwd`` against the server at ``address`` (None: no server), whose
    Kafka port is at ``kafka``; ``env``: more variables for a bash block's commands. A
    failing command or an exception fails the test. ``own_process``: a python block runs
    in a fresh interpreter instead of this one (a block that starts a Spark session)."""
    code = block.code
    if address is not None:
        port = address.rpartition(":")[2]
        code = ADDRESS.sub(lambda m: f"{m.group(1)}:{port}", code)
    if kafka is not None:
        code = KAFKA_ADDRESS.sub(kafka, code)
    if block.lang == "python" and own_process:
        script = cwd / "doc_block.py"
        script.write_text(code, encoding="utf-8")
        done = subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True,
                              text=True, timeout=OWN_PROCESS_TIMEOUT_S, check=False)
        assert done.returncode == 0, (f"{block.name} exited with {done.returncode}:\n"
                                      f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return
    if block.lang == "python":
        exec(compile(code, block.name, "exec"), {"__name__": "__doc_block__"})
        return
    env = {**os.environ, **(env or {}),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    if address is not None:
        env["FMQ_SERVER"] = address
    for command in bash_commands(code):
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, (f"{block.name}: `{command}` exited with "
                                      f"{done.returncode}:\n{done.stdout}\n{done.stderr}")
