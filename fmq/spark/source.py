"""``spark.read.format("fmq")``: the raw FMQ log as a Spark DataFrame.

Usage::

    from fmq.spark.source import register
    register(spark)                      # once per SparkSession
    df = spark.read.format("fmq").load("/var/lib/fmq")          # DATA_DIR or DATA_DIR/log
    df = spark.read.format("fmq").option("body", "true").load(path)

One Spark input partition per segment file. Every row is one record as
:meth:`fmq.log.record.Record.to_dict` describes it (the columns and values of
``fmq log dump --json``), plus ``segment`` (the file name) and ``damage``; ``body``
(binary) only with ``.option("body", "true")``. Fillers are rows too (type ``FILLER``),
exactly as ``fmq log dump`` prints them.

Every byte is parsed by :mod:`fmq.log.record` through
:class:`fmq.log.scanner.SegmentReader`, the same iterator recovery uses: there is no
second parser here. What this module adds is the part of
:class:`~fmq.log.scanner.LogScanner` that looks across segments (is a segment that stops
without its filler followed by valid records? is a segment missing?), because each Spark
task sees one segment. It is written to give the same answers as ``LogScanner``;
``tests/spark/test_source.py`` checks that on damaged logs.

Options:

``body``      ``false`` (default) or ``true``: add the ``body`` column (binary).
``mode``      ``failfast`` (default): corruption (a bad record with valid records after
              it, a missing segment) fails the job with
              :class:`~fmq.errors.CorruptLog` naming segment and offset.
              ``permissive``: never fail; each problem becomes a row whose ``damage``
              column holds ``{kind: "corrupt" | "torn", reason}``, with ``offset`` and
              ``segment`` set and the record columns null.
``tornTail``  ``fail`` (default): with ``failfast``, a torn tail (a bad or partial record
              with nothing valid after it anywhere in the log) fails the job with
              :class:`~fmq.spark.errors.TornTail`. ``allow``: report it as a damage row
              (what recovery would cut) and go on.
``maxRecordSize``  the decoder's length limit (default: the format's 4 GiB limit; the
              broker uses its segment size).

Paths: a local or shared-filesystem directory (read with ``mmap``), or a URI that
``pyarrow.fs`` understands (``s3://``, ``hdfs://``, ``file://``; segments are then read
whole into memory). See ``docs/spark.md`` for which of these are tested.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from urllib.parse import urlparse

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from fmq.datadir import LOG_DIR, format_segment_name, parse_segment_name
from fmq.errors import CorruptLog, InvalidArgument
from fmq.log.record import FORMAT_MAX_RECORD, NONE, RecordType
from fmq.log.scanner import Damage, SegmentReader, find_valid_record
from fmq.spark.errors import TornTail

#: Columns of every row, in order: (name, Spark DDL type, Arrow type). The record columns
#: are exactly the keys of ``Record.to_dict()`` (``fmq log dump --json``).
RECORD_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("offset", "bigint", pa.int64()),
    ("size", "bigint", pa.int64()),
    ("type", "string", pa.string()),
    ("store_time", "bigint", pa.int64()),
    ("topic", "string", pa.string()),
    ("queue_id", "int", pa.int32()),
    ("queue_offset", "bigint", pa.int64()),
    ("tx_id", "string", pa.string()),
    ("producer_group", "string", pa.string()),
    ("ref_offset", "bigint", pa.int64()),
    ("ref_size", "bigint", pa.int64()),
    ("key", "string", pa.string()),
    ("tags", "string", pa.string()),
    ("properties", "map<string,string>", pa.map_(pa.string(), pa.string())),
    ("body_size", "bigint", pa.int64()),
]
_DAMAGE_ARROW = pa.struct([("kind", pa.string()), ("reason", pa.string())])
EXTRA_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("segment", "string", pa.string()),
    ("damage", "struct<kind:string,reason:string>", _DAMAGE_ARROW),
]
BODY_COLUMN: tuple[str, str, pa.DataType] = ("body", "binary", pa.binary())
RECORD_FIELDS = [name for name, _ddl, _arrow in RECORD_COLUMNS]
_TYPE_NAMES = {int(t): t.name for t in RecordType}

#: Rows per Arrow batch handed to Spark: big enough to amortise the conversion, small
#: enough that a batch of 4 MiB bodies stays within an executor's memory.
_BATCH_ROWS = 4096
_BATCH_BODY_BYTES = 64 << 20


def columns(with_body: bool) -> list[tuple[str, str, pa.DataType]]:
    return RECORD_COLUMNS + EXTRA_COLUMNS + ([BODY_COLUMN] if with_body else [])


def schema_ddl(with_body: bool = False) -> str:
    """The DataFrame schema as a Spark DDL string."""
    return ", ".join(f"`{n}` {ddl}" for n, ddl, _a in columns(with_body))


def _flag(options: dict, name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = str(options.get(name, default)).lower()
    if value not in allowed:
        raise InvalidArgument(
            f"option {name}={options.get(name)!r} is not one of {', '.join(allowed)}")
    return value


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
        with open(self._file(base), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return b""
            return mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)


class SegmentPartition(InputPartition):
    """One segment file: its position in the log's segment list."""

    def __init__(self, index: int, base: int) -> None:
        super().__init__(index)
        self.index = index
        self.base = base


class _Batch:
    """Column lists of the rows of one Arrow batch."""

    def __init__(self, cols: list[tuple[str, str, pa.DataType]]) -> None:
        self.cols = cols
        self.names = [n for n, _d, _a in cols]
        self.data: dict[str, list] = {n: [] for n in self.names}
        self.rows = 0
        self.body_bytes = 0

    def add_record(self, rec, segment: str, with_body: bool) -> None:
        # Field by field what Record.to_dict() gives (the values of `fmq log dump --json`;
        # tests/spark compares the two), without building a dict per record: this loop is
        # most of the data source's CPU time.
        data = self.data
        data["offset"].append(rec.log_offset)
        data["size"].append(rec.size)
        data["type"].append(_TYPE_NAMES[rec.type])
        data["store_time"].append(rec.store_time)
        data["topic"].append(rec.topic or None)
        data["queue_id"].append(None if rec.queue_id == NONE else rec.queue_id)
        data["queue_offset"].append(None if rec.queue_offset == NONE else rec.queue_offset)
        data["tx_id"].append(rec.tx_id or None)
        data["producer_group"].append(rec.producer_group or None)
        data["ref_offset"].append(None if rec.ref_offset == NONE else rec.ref_offset)
        data["ref_size"].append(rec.ref_size or None)
        data["key"].append(rec.key)
        data["tags"].append(rec.tags)
        data["properties"].append(rec.properties or {})
        data["body_size"].append(len(rec.body))
        data["segment"].append(segment)
        data["damage"].append(None)
        if with_body:
            body = bytes(rec.body)
            data["body"].append(body)
            self.body_bytes += len(body)
        self.rows += 1

    def add_damage(self, damage: Damage, with_body: bool) -> None:
        data = self.data
        for name in RECORD_FIELDS:
            data[name].append(None)
        data["offset"][-1] = damage.offset
        data["segment"].append(damage.segment)
        data["damage"].append({"kind": damage.kind, "reason": damage.reason})
        if with_body:
            data["body"].append(None)
        self.rows += 1

    def full(self) -> bool:
        return self.rows >= _BATCH_ROWS or self.body_bytes >= _BATCH_BODY_BYTES

    def flush(self) -> pa.RecordBatch:
        # Spark rejects a batch whose Arrow types differ from the declared schema in any
        # way (int32 vs int64), so every array gets its type explicitly.
        arrays = [pa.array(self.data[n], type=t) for n, _d, t in self.cols]
        batch = pa.RecordBatch.from_arrays(arrays, names=self.names)
        self.data = {n: [] for n in self.names}
        self.rows = 0
        self.body_bytes = 0
        return batch


class FmqReader(DataSourceReader):
    """Lists the segments once (when Spark plans the scan) and reads one per task."""

    def __init__(self, path: str, options: dict) -> None:
        self.with_body = _flag(options, "body", "false", ("true", "false")) == "true"
        self.mode = _flag(options, "mode", "failfast", ("failfast", "permissive"))
        self.torn_tail = _flag(options, "torntail", "fail", ("fail", "allow"))
        try:
            self.max_record_size = int(options.get("maxrecordsize", FORMAT_MAX_RECORD))
        except ValueError:
            raise InvalidArgument("option maxRecordSize must be an integer number of bytes") from None
        self.files = SegmentFiles(path).resolve_log_dir()
        listed = self.files.list()
        self.bases = [b for b, _s in listed]
        self.sizes = [s for _b, s in listed]

    def partitions(self) -> list[SegmentPartition]:
        return [SegmentPartition(i, b) for i, b in enumerate(self.bases)]

    # ------------------------------------------------------------------ cross-segment facts
    # The same questions LogScanner asks while it walks the log, asked here per segment.

    def _later_has_valid(self, index: int) -> tuple[int, int] | None:
        """(base, position) of the first valid record in a segment after ``index``."""
        for base in self.bases[index + 1 :]:
            hit = find_valid_record(self.files.read(base), 0, base, self.max_record_size)
            if hit is not None:
                return base, hit
        return None

    def _reached(self, index: int, buf) -> bool:
        """Would LogScanner, reading from the first segment, get to segment ``index``?
        It stops at the first segment that ends without its filler with nothing valid
        after it; a segment holding a valid record is therefore always reached."""
        if index == 0 or find_valid_record(buf, 0, self.bases[index], self.max_record_size) is not None:
            return True
        if self._later_has_valid(index) is not None:
            return True
        # Nothing valid here or later: reached only when the segment before is sealed
        # (a segment without valid records cannot be, so the scanner stopped there).
        prev_base = self.bases[index - 1]
        prev = self.files.read(prev_base)
        if find_valid_record(prev, 0, prev_base, self.max_record_size) is None:
            return False
        reader = SegmentReader(prev, prev_base, format_segment_name(prev_base),
                               self.max_record_size)
        for _rec in reader.records(0, [], "skip", copy_body=False):
            pass
        return reader.state == "sealed"

    # ------------------------------------------------------------------ reading

    def read(self, partition: SegmentPartition) -> Iterator[pa.RecordBatch]:
        index = partition.index
        base = self.bases[index]
        name = format_segment_name(base)
        buf = self.files.read(base)
        on_corruption = "raise" if self.mode == "failfast" else "skip"
        batch = _Batch(columns(self.with_body))
        damages: list[Damage] = []
        reached: bool | None = None

        if index > 0:
            previous_end = self.bases[index - 1] + self.sizes[index - 1]
            if base != previous_end:
                reached = self._reached(index, buf)
                if reached:
                    reason = f"the segment starting at {previous_end} is missing"
                    if on_corruption == "raise":
                        raise CorruptLog(name, previous_end, reason)
                    batch.add_damage(Damage("corrupt", name, previous_end, reason), self.with_body)

        reader = SegmentReader(buf, base, name, self.max_record_size)
        seen = 0
        for rec in reader.records(0, damages, on_corruption, copy_body=self.with_body):
            while seen < len(damages):  # damage the reader skipped to reach this record
                batch.add_damage(damages[seen], self.with_body)
                seen += 1
            batch.add_record(rec, name, self.with_body)
            if batch.full():
                yield batch.flush()
        for d in damages[seen:]:
            batch.add_damage(d, self.with_body)

        if reader.state != "sealed":
            # The segment stops without its filler: fine only if nothing valid follows.
            end = base + reader.end_position
            later = None if index == len(self.bases) - 1 else self._later_has_valid(index)
            if later is not None:
                lbase, lpos = later
                reason = (f"segment ends without its filler "
                          f"({reader.torn_reason or 'no more records'}) but segment "
                          f"{format_segment_name(lbase)} holds a valid record at {lbase + lpos}")
                if on_corruption == "raise":
                    raise CorruptLog(name, end, reason)
                batch.add_damage(Damage("corrupt", name, end, reason), self.with_body)
            elif reader.state == "torn":
                if reached is None:
                    reached = self._reached(index, buf)
                if reached:
                    torn = Damage("torn", name, end, reader.torn_reason)
                    if self.mode == "failfast" and self.torn_tail == "fail":
                        raise TornTail(name, end, reader.torn_reason)
                    batch.add_damage(torn, self.with_body)
        if batch.rows:
            yield batch.flush()
        # The mmap is not closed here: decoded records may still hold views into it; it
        # goes with the last reference.


class FmqDataSource(DataSource):
    """``spark.read.format("fmq")``; see the module docstring for options."""

    @classmethod
    def name(cls) -> str:
        return "fmq"

    def schema(self) -> str:
        with_body = _flag(self.options, "body", "false", ("true", "false")) == "true"
        return schema_ddl(with_body)

    def reader(self, schema: StructType) -> FmqReader:
        path = self.options.get("path")
        if not path:
            raise InvalidArgument('give the data directory: spark.read.format("fmq").load(DIR)')
        # Option names reach us lower-cased by Spark's case-insensitive map; normalise
        # anyway so a direct call with "tornTail" works the same.
        opts = {k.lower(): v for k, v in self.options.items()}
        return FmqReader(path, opts)


def register(spark) -> None:
    """Make ``spark.read.format("fmq")`` available in ``spark`` (once per session)."""
    spark.dataSource.register(FmqDataSource)
