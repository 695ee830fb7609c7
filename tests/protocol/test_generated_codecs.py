"""The committed generated codecs are exactly what the generator writes for the schema as it
is, every struct of the schema uses one, and the implementation seat honours
FMQ_NO_EXTENSIONS."""

from __future__ import annotations

import os
import subprocess
import sys

from fmq.protocol.frame import ERROR_STRUCT, REQUEST_STRUCTS, RESPONSE_STRUCTS
from fmq.protocol.generate import TARGET, all_structs, render
from fmq.protocol.structs import Struct


def test_the_committed_codecs_are_what_the_generator_writes() -> None:
    assert TARGET.read_text() == render(), f"{TARGET.name} is stale: run python -m fmq.protocol.generate"


def test_every_struct_of_the_schema_uses_its_generated_codec() -> None:
    structs = [ERROR_STRUCT, *REQUEST_STRUCTS.values(), *RESPONSE_STRUCTS.values()]
    structs += [s for s in all_structs() if s not in structs]
    for st in structs:
        assert st._encode is not st.reference[0], st.name
        assert st._decode is not st.reference[1], st.name


def test_a_struct_the_generator_does_not_know_uses_the_reference() -> None:
    # Same name as a generated one but other fields: the generated code must not be used.
    st = Struct("send_result", [("offset", Struct("x", []))])
    assert (st._encode, st._decode) == st.reference


def _implementation(env: dict[str, str]) -> str:
    code = "from fmq.protocol import _impl; print(_impl.IMPLEMENTATION, _impl.codecs.__name__)"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True, timeout=60).stdout.strip()


def test_the_seat_chooses_pure_when_told_or_when_nothing_is_compiled() -> None:
    env = {k: v for k, v in os.environ.items() if k != "FMQ_NO_EXTENSIONS"}
    assert _implementation({**env, "FMQ_NO_EXTENSIONS": "1"}) == "pure fmq.protocol.struct_codecs"
    try:
        import fmq.protocol._struct_codecs_c  # noqa: F401
    except ImportError:
        assert _implementation(env) == "pure fmq.protocol.struct_codecs"
    else:
        assert _implementation(env) == "compiled fmq.protocol._struct_codecs_c"
