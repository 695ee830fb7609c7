"""The compiled batch writer (``fmq.index._batch_puts_c``: every database's puts with the
interpreter lock released once, through py-lmdb's engine table) against its reference
(``fmq.index.batch_puts``: py-lmdb's ``putmulti`` per database): the same batches applied to
two real LMDB environments leave byte-identical data files, return the same counts and
raise the same errors (class, message, code), map growth in the middle of a batch
included; calls the direct path does not take go to the reference before anything is
written; and a py-lmdb whose layout is not the mirrored one is refused, observably."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq import native
from fmq.index import batch_puts as reference
from fmq.index import store
from tests.native.twins import compiled

#: The index's databases a batch writes, and one with sorted duplicates (a pair stored
#: twice is one pair, and LMDB says "added" both times).
DBS = (b"cq", b"time", b"keys", b"keyoff", b"txends", b"txoff", b"dups")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fast():
    module = compiled("fmq.index._batch_puts_c")
    if not module.direct():
        pytest.fail(f"the direct path is refused on this machine: {module.REFUSED}")
    return module


class Env:
    """A real LMDB environment with the batch's databases, written as the index writes:
    one write transaction per batch, the map doubled and the batch written again when it
    is full (``IndexStore._write_locked``)."""

    def __init__(self, path: str, map_size: int) -> None:
        self.path = path
        self.env = lmdb.open(path, map_size=map_size, max_dbs=len(DBS), sync=False)
        self.dbs = [self.env.open_db(name, dupsort=name == b"dups") for name in DBS]
        self.grown = 0

    def apply(self, put_batches, batch: list[tuple[int, list]]) -> tuple:
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    return ("value", put_batches(txn, [(self.dbs[i], items)
                                                       for i, items in batch]))
            except lmdb.MapFullError:
                self.grown += 1
                self.env.set_mapsize(self.env.info()["map_size"] * 2)
            except Exception as exc:  # noqa: BLE001 - the twins must fail alike
                return ("raised", type(exc).__name__, str(exc), getattr(exc, "code", None))

    def contents(self) -> list[list[tuple[bytes, bytes]]]:
        with self.env.begin() as txn:
            return [list(txn.cursor(db=db)) for db in self.dbs]

    def data_file(self) -> bytes:
        self.env.close()
        return (Path(self.path) / "data.mdb").read_bytes()


def _both(fast, batches: list, map_size: int = 1 << 16) -> tuple[Env, Env, list, list]:
    scratch = tempfile.mkdtemp(prefix="fmq-batch-puts-")
    a = Env(os.path.join(scratch, "direct"), map_size)
    b = Env(os.path.join(scratch, "reference"), map_size)
    got = [a.apply(fast.put_batches, batch) for batch in batches]
    expected = [b.apply(reference.put_batches, batch) for batch in batches]
    return a, b, got, expected


def _assert_identical(a: Env, b: Env) -> None:
    assert a.contents() == b.contents()
    assert a.grown == b.grown
    assert a.data_file() == b.data_file()  # every page, free ones and meta pages included


#: Short keys (often repeated) and long ones up to LMDB's 511 bytes; short values, empty
#: ones and values of 2 to 20 KB (overflow pages), built from a byte and a length (cheap
#: for hypothesis to draw).
KEYS = st.binary(min_size=1, max_size=3) | st.builds(
    lambda head, n: head + b"k" * n, st.binary(min_size=1, max_size=4), st.integers(1, 500))
VALUES = st.binary(max_size=40) | st.sampled_from([b"", b"same"]) | st.builds(
    lambda byte, n: bytes([byte]) * n, st.integers(0, 255), st.integers(2000, 20_000))
ITEMS = st.lists(st.tuples(KEYS, VALUES), max_size=40)
BATCH = st.lists(st.tuples(st.integers(0, len(DBS) - 1), ITEMS), max_size=7)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(BATCH, min_size=1, max_size=6))
def test_the_same_batches_leave_byte_identical_databases(fast, batches):
    # Keys in and out of order, repeated within and across batches, empty lists, values up
    # to 20 KB (overflow pages) in a 64 KiB map that must grow, mid-batch, several times.
    a, b, got, expected = _both(fast, batches)
    assert got == expected
    _assert_identical(a, b)


def test_map_growth_in_the_middle_of_a_batch_writes_it_again_whole(fast):
    big = [(i.to_bytes(4, "big"), bytes([i % 251]) * 3000) for i in range(400)]
    dups = [(b"d", b"x"), (b"d", b"y"), (b"d", b"x"), (b"e", b"x")]  # a pair twice: 3 kept
    batches = [[(0, big[:200]), (1, [(b"t", b"1")])], [(0, big[200:]), (6, dups)]]
    a, b, got, expected = _both(fast, batches, map_size=1 << 16)
    assert got == expected == [("value", [(200, 200), (1, 1)]),
                               ("value", [(200, 200), (4, 4)])]
    assert a.contents()[6] == [(b"d", b"x"), (b"d", b"y"), (b"e", b"x")]
    assert a.grown >= 3
    _assert_identical(a, b)


@pytest.mark.parametrize("bad", [b"", b"k" * 512], ids=["empty key", "key too long"])
def test_an_lmdb_failure_raises_py_lmdbs_error_after_the_items_before_it(fast, bad):
    batches = [[(0, [(b"a", b"1")]), (2, [(b"b", b"2"), (bad, b"3"), (b"c", b"4")])],
               [(0, [(b"z", b"9")])]]
    a, b, got, expected = _both(fast, batches)
    assert got == expected
    assert got[0][:2] == ("raised", "BadValsizeError")
    assert got[0][2].startswith("mdb_cursor_put() element #1: ")
    _assert_identical(a, b)


def test_map_full_is_lmdbs_map_full_error_with_py_lmdbs_words(fast, tmp_path):
    # What IndexStore._write_locked catches to grow the map.
    errors = []
    for name, put_batches in (("direct", fast.put_batches), ("ref", reference.put_batches)):
        env = lmdb.open(str(tmp_path / name), map_size=1 << 16, max_dbs=2)
        db = env.open_db(b"cq")
        with pytest.raises(lmdb.MapFullError) as caught, env.begin(write=True) as txn:
            put_batches(txn, [(db, [(i.to_bytes(4, "big"), b"x" * 4000) for i in range(40)])])
        errors.append((str(caught.value), caught.value.code, caught.value.what,
                       caught.value.reason))
        env.close()
    assert errors[0] == errors[1]
    assert "Please use a larger Environment(map_size=) parameter" in errors[0][0]


def _outcome(fn, *args) -> tuple:
    try:
        return ("value", fn(*args))
    except Exception as exc:  # noqa: BLE001
        return ("raised", type(exc), str(exc))


def test_a_read_only_transaction_is_refused_as_py_lmdb_refuses_it(fast, tmp_path):
    env = lmdb.open(str(tmp_path), max_dbs=2)
    db = env.open_db(b"cq")
    with env.begin() as txn:
        got = _outcome(fast.put_batches, txn, [(db, [(b"a", b"1")])])
        expected = _outcome(reference.put_batches, txn, [(db, [(b"a", b"1")])])
    assert got == expected
    assert got[1] is lmdb.ReadonlyError


def test_what_is_not_a_transaction_is_a_type_error(fast, tmp_path):
    env = lmdb.open(str(tmp_path), max_dbs=2)
    db = env.open_db(b"cq")
    for not_a_txn in (None, env, db, object()):
        got = _outcome(fast.put_batches, not_a_txn, [(db, [(b"a", b"1")])])
        assert got == _outcome(reference.put_batches, not_a_txn, [(db, [(b"a", b"1")])])
        assert got[1] is TypeError


def test_calls_the_direct_path_does_not_take_go_to_the_reference_unwritten(fast, tmp_path):
    # Items that are not pairs of bytes, handles of another type or environment, an ended
    # transaction: the reference decides, the items before the surprise included.
    other = lmdb.open(str(tmp_path / "other"), max_dbs=2).open_db(b"cq")
    cases = {
        "bytearray and memoryview items": lambda dbs: [
            (dbs[0], [(b"a", b"1"), (bytearray(b"b"), memoryview(b"2"))])],
        "a str item": lambda dbs: [(dbs[0], [(b"a", b"1")]), (dbs[1], [("b", b"2")])],
        "an item of three": lambda dbs: [(dbs[0], [(b"a", b"1")]),
                                         (dbs[1], [(b"b", b"2", b"3")])],
        "a list for a pair": lambda dbs: [(dbs[0], [[b"a", b"1"]])],
        "items as a generator": lambda dbs: [(dbs[0], ((b"k%d" % i, b"v") for i in range(3)))],
        "the main database": lambda dbs: [(None, [(b"a", b"1")])],
        "a handle of another environment": lambda dbs: [(dbs[0], [(b"a", b"1")]),
                                                        (other, [(b"b", b"2")])],
        "not a handle": lambda dbs: [(dbs[0], [(b"a", b"1")]), (7, [(b"b", b"2")])],
        "not a pair": lambda dbs: [(dbs[0],)],
    }
    for name, make in cases.items():
        results = []
        for side, put_batches in (("direct", fast.put_batches), ("ref", reference.put_batches)):
            env = Env(str(tmp_path / f"{name}-{side}"), 1 << 20)
            results.append((env.apply(put_batches, make(env.dbs)), env.contents()))
        assert results[0] == results[1], name
    env = lmdb.open(str(tmp_path / "ended"), max_dbs=2)
    db = env.open_db(b"cq")
    txn = env.begin(write=True)
    txn.commit()
    got = _outcome(fast.put_batches, txn, [(db, [(b"a", b"1")])])
    assert got == _outcome(reference.put_batches, txn, [(db, [(b"a", b"1")])])
    assert got[1] is lmdb.Error


def test_the_store_runs_the_chosen_twin(fast):
    expected = reference.put_batches if native.no_extensions() else fast.put_batches
    assert store.PUT_BATCHES is expected


REFUSAL = """
import logging, sys
import lmdb
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
lmdb.__version__ = "9.9.9"  # a release whose layout nobody compared
from fmq.index import _batch_puts_c as fast
env = lmdb.open(sys.argv[1], max_dbs=2)
db = env.open_db(b"cq")
with env.begin(write=True) as txn:
    print("counts", fast.put_batches(txn, [(db, [(b"a", b"1"), (b"b", b"2")])]))
    print("again", fast.put_batches(txn, [(db, [(b"c", b"3")])]))
with env.begin() as txn:
    print("stored", list(txn.cursor(db=db)))
print("direct", fast.direct(), "refused", fast.REFUSED)
"""


def test_another_py_lmdb_release_is_refused_once_and_observably(fast, tmp_path):
    done = subprocess.run([sys.executable, "-c", REFUSAL, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    refusals = [line for line in lines if line.startswith("INFO ")]
    assert len(refusals) == 1, lines  # logged once, however many calls
    assert "py-lmdb 9.9.9 is not a release whose layout" in refusals[0]
    assert "counts [(2, 2)]" in lines and "again [(1, 1)]" in lines
    assert "stored [(b'a', b'1'), (b'b', b'2'), (b'c', b'3')]" in lines
    assert lines[-1].startswith("direct False refused py-lmdb 9.9.9 is not a release")
