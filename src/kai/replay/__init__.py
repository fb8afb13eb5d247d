"""``kai replay``: a discrete-event cluster simulator whose periods are real sessions.

* :mod:`kai.replay.trace`: the workload trace (CSV, Parquet, Alibaba's GPU trace);
* :mod:`kai.replay.synthetic`: seeded synthetic workloads;
* :mod:`kai.replay.simulator`: the simulator (:class:`Replay`);
* :mod:`kai.replay.report`: the summary, tables, plots and HTML report.
"""

from kai.replay.simulator import EPOCH, Replay, ReplayResult
from kai.replay.synthetic import WorkloadSpec, generate
from kai.replay.trace import Trace, TraceError, TraceJob, read_trace, write_csv

__all__ = [
    "EPOCH",
    "Replay",
    "ReplayResult",
    "Trace",
    "TraceError",
    "TraceJob",
    "WorkloadSpec",
    "generate",
    "read_trace",
    "write_csv",
]
