"""FMQ on Spark: the raw log as a DataFrame and the index rebuilt from it.

* :mod:`fmq.spark.source`: ``spark.read.format("fmq").load(DATA_DIR)`` (Spark 4's Python
  Data Source API), one input partition per segment file, checked by
  :class:`~fmq.log.reader.SegmentReader` and judged by :mod:`fmq.log.scanner`; the
  segment files come from :mod:`fmq.spark.files`, the batches from
  :mod:`fmq.spark.batches` (column-wise) and :mod:`fmq.spark.rows`.
* :mod:`fmq.spark.rebuild`: the index rebuild job (``fmq index rebuild DIR --spark``, or
  ``spark-submit`` of the module), run in passes by :mod:`~fmq.spark.session`,
  :mod:`~fmq.spark.derive`, :mod:`~fmq.spark.transactions`, :mod:`~fmq.spark.bulk_load`,
  :mod:`~fmq.spark.swap` and :mod:`~fmq.spark.audit` (the Parquet audit tables);
  :mod:`fmq.spark.class_archive` makes the JVM class archive its local sessions may start
  from.
* :mod:`fmq.spark.topic_source`: ``format("fmq-topic")``, the consumable messages of a
  running server's topics (batch and streaming), and the sink writing rows into topics
  exactly once (:mod:`~fmq.spark.topic_sink`, :mod:`~fmq.spark.sink_commit`,
  :mod:`~fmq.spark.sink_rows`).

Needs the ``spark`` extra (``pip install 'fmq[spark]'``) on the driver and on every
executor; ``docs/spark.md`` is the guide.
"""

__all__ = ["files", "rows", "source", "rebuild"]
