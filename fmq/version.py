"""The release of this FMQ package (written into transaction ids and shown by ``fmq --version``)."""

__version__ = "0.2.0"
