"""Fault-injection suite (issue 5): each fault class is its own test module
(``test_faultNN_*.py``); ``invariants.py`` checks I1-I7 after every fault and
``workload.py`` holds the deterministic workloads the child processes run. See
docs/reliability.md."""
