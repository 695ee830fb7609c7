"""Child-process workloads the tests start with ``python -m tests.workloads.NAME``."""
