"""The ``fmq`` command line (installed as the ``fmq.cli`` package)."""
