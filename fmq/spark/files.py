"""The Spark source's segment files: list and read the segments of one log directory,
on a local or shared filesystem (mmap, no copy) or behind a filesystem URI that
``pyarrow.fs`` understands (``s3://``, ``hdfs://``, ``file://``; read whole into memory).

:class:`SegmentFiles` is a byte source for :mod:`fmq.log.reader`: the log's own reader
and scanner parse what it hands out.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from fmq.datadir import LOG_DIR, format_segment_name, parse_segment_name
from fmq.errors import InvalidArgument
from fmq.log.reader import map_file


def _has_scheme(path: str) -> bool:
    # "C:/x" style drive letters do not occur on the POSIX systems FMQ runs on, so any
    # scheme of two or more letters is a filesystem URI.
    return len(urlparse(path).scheme) > 1


class SegmentFiles:
    """The segment files of one log directory: list, size, read. Local paths are mapped
    with mmap (no copy); URIs go through ``pyarrow.fs`` and are read whole."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fs = None
        self._root = path

    def _filesystem(self):
        if self._fs is None:
            from pyarrow import fs as pafs

            self._fs, self._root = pafs.FileSystem.from_uri(self.path)
        return self._fs

    @property
    def remote(self) -> bool:
        return _has_scheme(self.path)

    def resolve_log_dir(self) -> SegmentFiles:
        """DATA_DIR or DATA_DIR/log: the directory that holds the segments."""
        if self.remote:
            from pyarrow import fs as pafs

            fs = self._filesystem()
            info = fs.get_file_info(self._root.rstrip("/") + "/" + LOG_DIR)
            if info.type == pafs.FileType.Directory:
                return SegmentFiles(self.path.rstrip("/") + "/" + LOG_DIR)
            if fs.get_file_info(self._root).type != pafs.FileType.Directory:
                raise InvalidArgument(f"{self.path} is not a directory: give DATA_DIR or "
                                      f"DATA_DIR/log of an FMQ data directory")
            return self
        if os.path.isdir(os.path.join(self.path, LOG_DIR)):
            return SegmentFiles(os.path.join(self.path, LOG_DIR))
        if not os.path.isdir(self.path):
            raise InvalidArgument(f"{self.path} is not a directory: give DATA_DIR or "
                                  f"DATA_DIR/log of an FMQ data directory")
        return self

    def list(self) -> list[tuple[int, int]]:
        """(base offset, file size) of every segment, in log order."""
        out = []
        if self.remote:
            from pyarrow import fs as pafs

            for info in self._filesystem().get_file_info(pafs.FileSelector(self._root)):
                base = parse_segment_name(info.base_name)
                if base is not None:
                    out.append((base, info.size))
        else:
            for name in os.listdir(self.path):
                base = parse_segment_name(name)
                if base is not None:
                    out.append((base, os.stat(os.path.join(self.path, name)).st_size))
        return sorted(out)

    def bases(self) -> list[int]:
        """Base offsets of the segments, in log order."""
        return [base for base, _size in self.list()]

    def size(self, base: int) -> int:
        if self.remote:
            return self._filesystem().get_file_info(self._file(base)).size
        return os.stat(self._file(base)).st_size

    def _file(self, base: int) -> str:
        root = self._root if self.remote else self.path
        return root.rstrip("/") + "/" + format_segment_name(base)

    def read(self, base: int):
        """The bytes of one segment (an mmap for local files; ``b""`` when empty)."""
        if self.remote:
            with self._filesystem().open_input_file(self._file(base)) as f:
                return f.readall()
        return map_file(self._file(base))
