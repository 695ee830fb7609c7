"""The suite must not fill the disk: every test server preallocates two 64 MiB segments, and
a full run starts hundreds of them. CI once failed 30 tests with ENOSPC because pytest kept
every test's tmp_path until the run ended (and the last three runs' besides)."""

from __future__ import annotations

import os


def test_a_passing_tests_tmp_path_is_deleted_when_it_ends(request: object) -> None:
    assert request.config.getini("tmp_path_retention_policy") == "failed", (  # type: ignore[attr-defined]
        "keep tmp_path_retention_policy = \"failed\" in pyproject.toml: the suite's data "
        "directories add up to tens of GB")


_first_path: list[str] = []


def test_write_a_segment_sized_file(tmp_path: os.PathLike) -> None:
    path = os.path.join(tmp_path, "segment")
    with open(path, "wb") as f:
        f.truncate(1 << 20)
    _first_path.append(path)


def test_the_previous_tests_file_is_gone() -> None:
    # Runs after the test above (pytest keeps a file's order); with -k selecting this test
    # alone there is nothing to check.
    if not _first_path:
        return
    assert not os.path.exists(_first_path[0]), "a passing test's tmp_path outlived its test"
