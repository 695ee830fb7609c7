"""``spark.read.format("fmq")``: the raw FMQ log as a Spark DataFrame.

Usage::

    from fmq.spark.source import register
    register(spark)                      # once per SparkSession
    df = spark.read.format("fmq").load("/var/lib/fmq")          # DATA_DIR or DATA_DIR/log
    df = spark.read.format("fmq").option("body", "true").load(path)

One Spark input partition per segment file, or per range of a large one (``splitBytes``). Every row is one record as
:meth:`fmq.log.record.Record.to_dict` describes it (the columns and values of
``fmq log dump --json``), plus ``segment`` (the file name) and ``damage``; ``body``
(binary) only with ``.option("body", "true")``. Fillers are rows too (type ``FILLER``),
exactly as ``fmq log dump`` prints them.

Every record is checked by :class:`fmq.log.reader.SegmentReader` (length, CRC, header)
and judged by :class:`fmq.log.scanner.SegmentScan`, the reader and the verdicts recovery
uses: there is no second copy of the rules here. The checked records of a chunk become
one Arrow batch column-wise (:mod:`fmq.spark.batches`); filters Spark pushes are applied
by :mod:`fmq.spark.pushdown` (an offset range skips whole segments). Each Spark task scans one segment
in the context of the whole log, so it gives the same answers as
:class:`~fmq.log.scanner.LogScanner`; ``tests/spark/test_source.py`` checks that on
damaged logs. The segment files come from :mod:`fmq.spark.files`, the rows and their
schema from :mod:`fmq.spark.rows`.

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
``splitBytes``  read a segment larger than this (default 64 MiB) in ranges of about this
              many bytes, split at record boundaries, one Spark task each.
``pushdown``  ``false`` (default) or ``true``: take the filters Spark pushes
              (:mod:`fmq.spark.pushdown`); see :class:`FilteringFmqReader` for why it
              is opt-in.
``maxRecordSize``  the decoder's length limit (default: the format's 4 GiB limit; the
              broker uses its segment size).

Paths: a local or shared-filesystem directory (read with ``mmap``), or a URI that
``pyarrow.fs`` understands (``s3://``, ``hdfs://``, ``file://``; segments are then read
whole into memory). See ``docs/spark.md`` for which of these are tested.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from fmq.datadir import format_segment_name
from fmq.errors import InvalidArgument, TornTail  # not via fmq.spark.errors: fmq.protocol
from fmq.log.reader import Damage, OnCorruption, SegmentReader
from fmq.log.record import FORMAT_MAX_RECORD, record_length
from fmq.log.scanner import LogSegments, SegmentScan
from fmq.spark.batches import TextNotValid, record_batch
from fmq.spark.files import SegmentFiles
from fmq.spark.pushdown import PushedFilters
from fmq.spark.rows import BATCH_BODY_BYTES, BATCH_ROWS, RowBatch, arrow_schema, columns, schema_ddl

# Every executor's Python worker imports this module: TornTail comes from fmq.errors
# because fmq.spark.errors imports fmq.protocol, 0.14 CPU seconds of each worker's start
# for nothing (tests/spark/test_worker_daemon.py checks the executors' imports).


def _flag(options: dict, name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = str(options.get(name, default)).lower()
    if value not in allowed:
        raise InvalidArgument(
            f"option {name}={options.get(name)!r} is not one of {', '.join(allowed)}")
    return value


#: Segments larger than this are read in ranges of about this size, one task each.
DEFAULT_SPLIT_BYTES = 64 << 20


class SegmentPartition(InputPartition):
    """One segment file (its position in the log's segment list), or one range of it:
    the records starting in ``[start, stop)`` of its bytes (``stop`` None: to the end)."""

    def __init__(self, index: int, base: int, start: int = 0, stop: int | None = None) -> None:
        super().__init__((index, start))
        self.index = index
        self.base = base
        self.start = start
        self.stop = stop


class FmqReader(DataSourceReader):
    """Lists the segments once (when Spark plans the scan) and reads one per task."""

    def __init__(self, path: str, options: dict) -> None:
        self.with_body = _flag(options, "body", "false", ("true", "false")) == "true"
        self.mode = _flag(options, "mode", "failfast", ("failfast", "permissive"))
        self.torn_tail = _flag(options, "torntail", "fail", ("fail", "allow"))
        try:
            self.max_record_size = int(options.get("maxrecordsize", FORMAT_MAX_RECORD))
            self.split_bytes = int(options.get("splitbytes", DEFAULT_SPLIT_BYTES))
        except ValueError:
            raise InvalidArgument("options maxRecordSize and splitBytes must be integer numbers "
                                  "of bytes") from None
        if self.split_bytes < 1:
            raise InvalidArgument("option splitBytes must be at least 1 (byte)")
        self.files = SegmentFiles(path).resolve_log_dir()
        listed = self.files.list()
        self.bases = [b for b, _s in listed]
        self.sizes = [s for _b, s in listed]
        self.log = LogSegments(self.files, self.max_record_size, self.bases)
        self.pushed = PushedFilters()

    def partitions(self) -> list[SegmentPartition]:
        ends = self.bases[1:] + [self.bases[-1] + self.sizes[-1]] if self.bases else []
        out: list[SegmentPartition] = []
        for i, (base, end) in enumerate(zip(self.bases, ends, strict=True)):
            if not self.pushed.wants_segment(base, end):
                continue
            if self.sizes[i] <= self.split_bytes or self.files.remote:
                out.append(SegmentPartition(i, base))
                continue
            # A large segment becomes ranges at record boundaries, one task each (a remote
            # segment is not split: finding the boundaries would read it on the driver).
            reader = SegmentReader(self.log.read(i), base, format_segment_name(base),
                                   self.max_record_size)
            points = reader.split_points(self.split_bytes)
            out += [SegmentPartition(i, base, start, stop)
                    for start, stop in zip(points, points[1:] + [None], strict=True)]
        return out

    def read(self, partition: SegmentPartition) -> Iterator[pa.RecordBatch]:
        index = partition.index
        previous_end = self.bases[index - 1] + self.sizes[index - 1] if index > 0 else None
        # Batched: the scanner hands over runs of checked positions (compiled: one call
        # per run of up to 4,096 records, no Python step per record).
        scan = SegmentScan(self.log, index, start=partition.start, stop=partition.stop,
                           previous_end=previous_end if partition.start == 0 else None,
                           on_corruption=self._on_corruption(), standalone=True, positions=True,
                           batched=True)
        schema = arrow_schema(self.with_body)
        chunk: list[int] = []
        chunk_bytes = 0
        try:
            for run in scan:
                if isinstance(run[0], Damage):
                    if chunk:
                        yield record_batch(scan.buf, chunk, scan.name, self.with_body, schema,
                                           self.pushed)
                        chunk, chunk_bytes = [], 0
                    yield self._damage_batch(run[0])
                    continue
                if not self.with_body:
                    chunk += run
                    while len(chunk) >= BATCH_ROWS:
                        yield record_batch(scan.buf, chunk[:BATCH_ROWS], scan.name, False,
                                           schema, self.pushed)
                        chunk = chunk[BATCH_ROWS:]
                    continue
                for item in run:  # bodies: a batch also stops at BATCH_BODY_BYTES
                    chunk.append(item)
                    chunk_bytes += record_length(scan.buf, item)
                    if len(chunk) >= BATCH_ROWS or chunk_bytes >= BATCH_BODY_BYTES:
                        yield record_batch(scan.buf, chunk, scan.name, True, schema,
                                           self.pushed)
                        chunk, chunk_bytes = [], 0
            if chunk:
                yield record_batch(scan.buf, chunk, scan.name, self.with_body, schema,
                                   self.pushed)
        except TextNotValid:
            # A record whose CRC matches but whose text does not decode: read on from the
            # chunk record by record, so it is judged exactly as recovery judges it.
            yield from self._read_rows(index, chunk[0], partition.stop)
            return
        yield from self._torn_tail(scan)

    def _on_corruption(self) -> OnCorruption:
        return OnCorruption.RAISE if self.mode == "failfast" else OnCorruption.SKIP

    def _damage_batch(self, damage: Damage) -> pa.RecordBatch:
        batch = RowBatch(columns(self.with_body))
        batch.add_damage(damage, self.with_body)
        return self._filtered(batch.flush())

    def _filtered(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if not self.pushed.active:
            return batch
        keep = self.pushed.mask({name: batch.column(name) for name in batch.schema.names})
        return batch.filter(pa.array(keep))

    def _torn_tail(self, scan: SegmentScan) -> Iterator[pa.RecordBatch]:
        torn = scan.torn
        if torn is not None:
            if self.mode == "failfast" and self.torn_tail == "fail":
                raise TornTail(torn.segment, torn.offset, torn.reason)
            yield self._damage_batch(torn)

    def _read_rows(self, index: int, start: int, stop: int | None) -> Iterator[pa.RecordBatch]:
        """The records of segment ``index`` from buffer position ``start`` (to ``stop``),
        decoded one by one (the fallback of the column-wise path)."""
        scan = SegmentScan(self.log, index, start=start, stop=stop,
                           on_corruption=self._on_corruption(), copy_body=self.with_body,
                           standalone=True)
        batch = RowBatch(columns(self.with_body))
        for item in scan:
            if isinstance(item, Damage):
                batch.add_damage(item, self.with_body)
                continue
            batch.add_record(item, scan.name, self.with_body)
            if batch.full():
                yield self._filtered(batch.flush())
        if batch.rows:
            yield self._filtered(batch.flush())
        yield from self._torn_tail(scan)
        # The mmap is not closed here: decoded records may still hold views into it; it
        # goes with the last reference.


class FilteringFmqReader(FmqReader):
    """:class:`FmqReader` that takes pushed filters (option ``pushdown=true``).

    Opt-in because Spark (4.1 to 4.3 at least) hands every scan of one DataFrame the
    pushed filters of one of them: ``df.where(a).union(df.where(b))`` reads ``b``'s rows
    twice. Give each differently filtered scan its own ``load()``."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 - Spark's name
        """Take the filters :mod:`fmq.spark.pushdown` can apply; hand the rest back."""
        for f in filters:
            if not self.pushed.take(f):
                yield f


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
        if _flag(opts, "pushdown", "false", ("true", "false")) == "true":
            return FilteringFmqReader(path, opts)
        return FmqReader(path, opts)


def register(spark) -> None:
    """Make ``spark.read.format("fmq")`` available in ``spark`` (once per session), with
    filter pushdown into Python data sources on (the source implements it, and Spark
    refuses such a source while ``spark.sql.python.filterPushdown.enabled`` is off)."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(FmqDataSource)
