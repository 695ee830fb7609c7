"""The broker: :class:`fmq.engine.broker.Broker` wires the log, the index, transactions,
checkpoints and retention together; each of the other modules here does one of its jobs."""
