"""FMQ on Spark: the raw log as a DataFrame and the index rebuilt from it.

* :mod:`fmq.spark.source`: ``spark.read.format("fmq").load(DATA_DIR)`` (Spark 4's Python
  Data Source API), one input partition per segment file, parsed by
  :class:`~fmq.log.reader.SegmentReader` and judged by :mod:`fmq.log.scanner`; the
  segment files come from :mod:`fmq.spark.files`, the rows from :mod:`fmq.spark.rows`.
* :mod:`fmq.spark.rebuild`: the index rebuild job (``fmq index rebuild DIR --spark``, or
  ``spark-submit`` of the module) and the Parquet audit tables.

Needs the ``spark`` extra (``pip install 'fmq[spark]'``) on the driver and on every
executor; ``docs/spark.md`` is the guide.
"""

__all__ = ["files", "rows", "source", "rebuild"]
