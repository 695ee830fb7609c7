"""The load generator behind ``fmq bench``: lean asyncio connections speaking the wire
protocol, in several processes, with pre-encoded request frames and mergeable latency
histograms.

It is a client: it imports only the protocol, the client, the errors, the message checks,
the version and the standard library, never the server's storage code.

* :mod:`fmq.loadgen.histogram`: latency histogram (log-linear buckets, merged by adding);
* :mod:`fmq.loadgen.frames`: request frames encoded once, with the request id patched in;
* :mod:`fmq.loadgen.driver`: one process's connections, each a callback-driven request loop;
* :mod:`fmq.loadgen.worker`: the entry point of a load process;
* :mod:`fmq.loadgen.probe`: what the run asks the server before and after (STATS, ranges);
* :mod:`fmq.loadgen.runner`: the processes, the start signal, merging, the count check;
* :mod:`fmq.loadgen.report`: the report and its text and JSON forms.
"""

from fmq.loadgen.histogram import Histogram
from fmq.loadgen.report import BenchReport
from fmq.loadgen.runner import BenchSpec, run_bench

__all__ = ["BenchReport", "BenchSpec", "Histogram", "run_bench"]
