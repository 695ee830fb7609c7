"""The new index replaces the old one through FileIO: renames, then a directory fsync."""

from __future__ import annotations

from fmq.log.fileio import FileIO
from fmq.spark.swap import swap_in


class _Recording(FileIO):
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def rename(self, src: str, dst: str) -> None:
        self.calls.append(("rename", src, dst))
        super().rename(src, dst)

    def fsync_dir(self, path: str) -> None:
        self.calls.append(("fsync_dir", path))
        super().fsync_dir(path)


def test_swap_replaces_the_old_index_and_syncs_the_directory(tmp_path):
    target, tmp = tmp_path / "index", tmp_path / "index.spark-tmp"
    target.mkdir()
    (target / "old").write_text("old")
    tmp.mkdir()
    (tmp / "new").write_text("new")
    io = _Recording()
    swap_in(str(tmp), str(target), io)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]
    assert [p.name for p in target.iterdir()] == ["new"]
    assert [c[0] for c in io.calls] == ["rename", "rename", "fsync_dir"]
    assert io.calls[-1] == ("fsync_dir", str(tmp_path))


def test_swap_without_an_old_index(tmp_path):
    tmp = tmp_path / "out.spark-tmp"
    tmp.mkdir()
    swap_in(str(tmp), str(tmp_path / "out"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
