"""Workload traces: one entry per job, read from CSV, Parquet or Alibaba's GPU trace.

The documented CSV format has one row per job and these columns (any order, a header
line first):

* ``submit_time``: seconds from the start of the replay;
* ``job``: the job's name (unique within its namespace);
* ``queue``: the leaf queue it is submitted to;
* ``priority_class``: a PriorityClass of the cluster;
* ``pods``: the number of pods; ``min_member``: the gang's minimum (<= pods);
* ``gpus_per_pod``: GPUs per pod; a fraction below 1 asks for a share of one device;
* ``cpu_per_pod``, ``memory_per_pod``: Kubernetes quantities (``500m``, ``16Gi``);
* ``duration``: seconds of running the job needs to finish.

Optional columns: ``preemptibility`` (``preemptible``, ``non-preemptible`` or
``semi-preemptible``; empty: from the priority) and ``namespace`` (default
``default``).  Parquet files take the same columns.
"""

from __future__ import annotations

import csv
import hashlib
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import field, replace
from typing import Any

from kai._dataclasses import dataclass
from kai.api.errors import InputError
from kai.api.preemptibility import VALID_VALUES
from kai.api.quantity import parse_quantity, to_canonical

REQUIRED_COLUMNS = (
    "submit_time",
    "job",
    "queue",
    "priority_class",
    "pods",
    "min_member",
    "gpus_per_pod",
    "cpu_per_pod",
    "memory_per_pod",
    "duration",
)
OPTIONAL_COLUMNS = ("preemptibility", "namespace")
COLUMNS = REQUIRED_COLUMNS + OPTIONAL_COLUMNS


class TraceError(InputError):
    """A trace entry that cannot be read: names the file, line and column."""

    def __init__(
        self,
        message: str,
        *,
        file: str,
        line: int | None = None,
        column: str | None = None,
        unit: str = "line",
    ) -> None:
        self.line = line  # the line of a CSV file, the row (from 1) of a Parquet table
        self.column = column
        super().__init__(
            message,
            file=file,
            obj=None if line is None else f"{unit} {line}",
            field=column,
        )


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace (resources in canonical units: millicores, bytes, devices)."""

    submit_time: float
    job: str
    queue: str
    priority_class: str
    pods: int
    min_member: int
    gpus_per_pod: float
    cpu_per_pod: float
    memory_per_pod: float
    duration: float
    preemptibility: str | None = None
    namespace: str = "default"
    # Where the entry was read (0: not from a file), for error messages.
    line: int = field(default=0, compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.job}"

    @property
    def gpus(self) -> float:
        return self.pods * self.gpus_per_pod

    def row(self) -> dict[str, Any]:
        """The job as a row of the documented format (quantities in canonical units)."""
        return {
            "submit_time": _number_text(self.submit_time),
            "job": self.job,
            "queue": self.queue,
            "priority_class": self.priority_class,
            "pods": self.pods,
            "min_member": self.min_member,
            "gpus_per_pod": _number_text(self.gpus_per_pod),
            "cpu_per_pod": f"{_number_text(self.cpu_per_pod)}m",
            "memory_per_pod": _number_text(self.memory_per_pod),
            "duration": _number_text(self.duration),
            "preemptibility": self.preemptibility or "",
            "namespace": self.namespace,
        }


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


# ------------------------------------------------------------------ parsing one row
def _seconds(text: str, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r} must be a finite number of seconds >= 0")
    return value


def _count(text: str, column: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
    if not value.is_integer() or value < 0:
        raise ValueError(f"{text!r} must be a whole number >= 0")
    return int(value)


def _quantity(text: str, resource: str) -> float:
    value = to_canonical(resource, parse_quantity(text.strip(), what=resource))
    if value < 0:
        raise ValueError(f"{text!r} must not be negative")
    return value


def parse_row(values: dict[str, str]) -> TraceJob:
    """A job from one row's text values; a ValueError names the column at fault."""

    def get(column: str) -> str:
        value = values.get(column)
        return "" if value is None else str(value).strip()

    def value_of(column: str, parse: Callable[[str], Any]) -> Any:
        text = get(column)
        if text == "" and column in REQUIRED_COLUMNS:
            raise _ColumnError(column, "is empty")
        try:
            return parse(text)
        except ValueError as err:
            raise _ColumnError(column, str(err)) from None

    submit = value_of("submit_time", lambda t: _seconds(t, "submit_time"))
    name = value_of("job", str)
    queue = value_of("queue", str)
    priority_class = value_of("priority_class", str)
    pods = value_of("pods", lambda t: _count(t, "pods"))
    if pods < 1:
        raise _ColumnError("pods", f"{get('pods')!r} must be at least 1")
    min_member = value_of("min_member", lambda t: _count(t, "min_member"))
    if not 1 <= min_member <= pods:
        raise _ColumnError("min_member", f"{min_member} must be between 1 and pods ({pods})")
    gpus = value_of("gpus_per_pod", lambda t: _quantity(t, "nvidia.com/gpu"))
    if gpus > 1 and not float(gpus).is_integer():
        raise _ColumnError(
            "gpus_per_pod", f"{get('gpus_per_pod')!r}: above 1 GPU only whole devices are allowed"
        )
    cpu = value_of("cpu_per_pod", lambda t: _quantity(t, "cpu"))
    memory = value_of("memory_per_pod", lambda t: _quantity(t, "memory"))
    duration = value_of("duration", lambda t: _seconds(t, "duration"))
    preemptibility = get("preemptibility") or None
    if preemptibility is not None and preemptibility not in VALID_VALUES:
        raise _ColumnError(
            "preemptibility",
            f"{preemptibility!r} is not one of {', '.join(VALID_VALUES)}",
        )
    namespace = get("namespace") or "default"
    return TraceJob(
        submit,
        name,
        queue,
        priority_class,
        pods,
        min_member,
        gpus,
        cpu,
        memory,
        duration,
        preemptibility,
        namespace,
    )


class _ColumnError(ValueError):
    def __init__(self, column: str, message: str) -> None:
        super().__init__(message)
        self.column = column
        self.message = message


# ------------------------------------------------------------------ readers
class Trace:
    """A trace file read lazily, in submit-time order, one job at a time.

    CSV is read as the replay goes: a malformed row raises :class:`TraceError` (with
    its line and column) only when the replay reaches it, so what was simulated
    before it can still be written out.  ``validate()`` reads the whole file first.
    """

    def __init__(self, path: str, *, queues: Sequence[str] = ()) -> None:
        self.path = path
        self.queues = list(queues)
        if not os.path.exists(path):
            raise TraceError("no such file", file=path)

    def __iter__(self) -> Iterator[TraceJob]:
        path = self.path
        lower = path.lower()
        if lower.endswith((".parquet", ".pq")):
            return iter(read_parquet(path))
        if os.path.basename(lower).startswith("pai_job_table"):
            return iter(read_alibaba(path, queues=self.queues))
        return read_csv(path)

    def validate(self) -> list[TraceJob]:
        return list(self)


def read_trace(path: str, *, queues: Sequence[str] = ()) -> list[TraceJob]:
    """Every job of a trace file (CSV, Parquet or Alibaba's ``pai_job_table.csv``)."""
    return Trace(path, queues=queues).validate()


def read_csv(path: str) -> Iterator[TraceJob]:
    """The jobs of a CSV trace in file order; submit times must not go back."""
    with open(path, newline="", encoding="utf-8") as fh:
        yield from _read_rows(csv.reader(fh), path)


def _read_rows(reader: Any, path: str) -> Iterator[TraceJob]:
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError("the trace is empty: a header line is needed", file=path) from None
    except csv.Error as err:
        raise TraceError(f"not CSV: {err}", file=path, line=1) from None
    header = [h.strip() for h in header]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise TraceError(
            f"missing column(s) {', '.join(missing)} (the header must name "
            f"{', '.join(REQUIRED_COLUMNS)})",
            file=path,
            line=1,
        )
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise TraceError(
            f"unknown column(s) {', '.join(unknown)}; known: {', '.join(COLUMNS)}",
            file=path,
            line=1,
        )
    seen: dict[str, int] = {}
    last = 0.0
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise TraceError(f"not CSV: {err}", file=path, line=reader.line_num) from None
        line = reader.line_num
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise TraceError(
                f"{len(cells)} values where the header has {len(header)} columns",
                file=path,
                line=line,
            )
        values = dict(zip(header, cells))
        job = replace(_parse_located(values, path, line, header), line=line)
        if job.submit_time < last:
            raise TraceError(
                f"{values['submit_time'].strip()} is earlier than the row before "
                f"({_number_text(last)}): rows must be in submit-time order",
                file=path,
                line=line,
                column=_column_ref("submit_time", header),
            )
        last = job.submit_time
        if job.key in seen:
            raise TraceError(
                f"job {job.key} is also on line {seen[job.key]}",
                file=path,
                line=line,
                column=_column_ref("job", header),
            )
        seen[job.key] = line
        yield job


def _column_ref(column: str, header: Sequence[str]) -> str:
    """'duration (column 10)': the name and its 1-based position in the file."""
    if column in header:
        return f"{column} (column {list(header).index(column) + 1})"
    return column


def _parse_located(
    values: dict[str, str], path: str, line: int, header: Sequence[str], unit: str = "line"
) -> TraceJob:
    try:
        return parse_row(values)
    except _ColumnError as err:
        raise TraceError(
            err.message, file=path, line=line, column=_column_ref(err.column, header), unit=unit
        ) from None


def read_parquet(path: str) -> list[TraceJob]:
    """The jobs of a Parquet trace (same columns as CSV), sorted by submit time."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TraceError(
            "reading Parquet needs pyarrow: pip install 'kai[replay]'", file=path
        ) from None
    try:
        table = pq.read_table(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for bad files
        raise TraceError(f"not a Parquet file: {err}", file=path) from None
    header = list(table.column_names)
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise TraceError(f"missing column(s) {', '.join(missing)}", file=path)
    columns = {name: table.column(name).to_pylist() for name in header if name in COLUMNS}
    jobs = []
    seen: dict[str, int] = {}
    for i in range(table.num_rows):
        values = {
            name: "" if col[i] is None else _cell_text(col[i]) for name, col in columns.items()
        }
        # Rows are numbered from 1, as a person reading the table counts them.
        job = _parse_located(values, path, i + 1, header, unit="row")
        if job.key in seen:
            raise TraceError(
                f"job {job.key} is also in row {seen[job.key]}", file=path, line=i + 1, unit="row"
            )
        seen[job.key] = i + 1
        jobs.append(job)
    jobs.sort(key=lambda j: j.submit_time)
    return jobs


def _cell_text(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def write_csv(jobs: Iterable[TraceJob], path: str) -> None:
    """Write jobs in the documented CSV format."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        writer.writeheader()
        for job in jobs:
            writer.writerow(job.row())


def write_parquet(jobs: Iterable[TraceJob], path: str) -> None:
    """Write jobs as a Parquet trace (needs pyarrow)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [job.row() for job in jobs]
    table = pa.table({name: [str(r[name]) for r in rows] for name in COLUMNS})
    pq.write_table(table, path)


# ------------------------------------------------------------------ Alibaba PAI 2020
# cluster-trace-gpu-v2020 ships its tables as CSV files without a header line.
ALIBABA_JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
ALIBABA_TASK_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)


def read_alibaba(
    job_table: str,
    *,
    task_table: str | None = None,
    queues: Sequence[str] = (),
    priority_class: str = "train",
) -> list[TraceJob]:
    """Jobs from Alibaba's cluster-trace-gpu-v2020 (``pai_job_table.csv``).

    The job table gives submission (``start_time``) and the status; resources and
    running time come from ``pai_task_table.csv`` beside it (or ``task_table``).  Only
    jobs that completed (status ``Terminated``) are replayed.  A job becomes one gang of
    its largest task's instances (``inst_num`` pods, ``plan_gpu`` percent of a GPU,
    ``plan_cpu`` percent of a core and ``plan_mem`` GB each); it runs from its first task
    launch to its last task end.  Users map to ``queues`` by a stable hash (every job
    goes to ``queue-<user>`` when no queues are given).  Submit times start at 0.
    """
    if task_table is None:
        task_table = os.path.join(os.path.dirname(job_table), "pai_task_table.csv")
    if not os.path.exists(task_table):
        raise TraceError(
            "the Alibaba job table needs its task table (resources, running time) "
            "beside it: pai_task_table.csv",
            file=job_table,
        )
    tasks: dict[str, list[Any]] = {}  # job -> [pods, gpu%, cpu%, mem GB, start, end]
    for line, row in _table_rows(task_table, ALIBABA_TASK_COLUMNS, "task"):
        try:
            pods = max(1, int(float(row["inst_num"] or 1)))
            gpu = float(row["plan_gpu"] or 0)
            cpu = float(row["plan_cpu"] or 0)
            mem = float(row["plan_mem"] or 0)
            start = float(row["start_time"]) if row["start_time"] else math.nan
            end = float(row["end_time"]) if row["end_time"] else math.nan
        except ValueError as err:
            raise TraceError(str(err), file=task_table, line=line) from None
        entry = tasks.get(row["job_name"])
        if entry is None:
            tasks[row["job_name"]] = [pods, gpu, cpu, mem, start, end]
            continue
        if (gpu * pods, cpu * pods) > (entry[1] * entry[0], entry[2] * entry[0]):
            entry[:4] = [pods, gpu, cpu, mem]
        entry[4] = min(entry[4], start) if not math.isnan(start) else entry[4]
        entry[5] = max(entry[5], end) if not math.isnan(end) else entry[5]
    jobs: list[TraceJob] = []
    for line, row in _table_rows(job_table, ALIBABA_JOB_COLUMNS, "job"):
        if row["status"] != "Terminated":
            continue
        entry = tasks.get(row["job_name"])
        if entry is None:
            continue
        try:
            submit = float(row["start_time"])
        except ValueError:
            raise TraceError(
                f"start_time {row['start_time']!r} is not a number",
                file=job_table,
                line=line,
                column="start_time (column 5)",
            ) from None
        pods, gpu, cpu, mem, start, end = entry
        if math.isnan(start) or math.isnan(end) or end <= start:
            continue
        gpus = gpu / 100.0
        if gpus > 1:
            gpus = float(math.ceil(gpus - 1e-9))
        user = row["user"]
        queue = _queue_of(user, queues)
        jobs.append(
            TraceJob(
                submit,
                row["job_name"],
                queue,
                priority_class,
                pods,
                pods,
                round(gpus, 4),
                to_canonical("cpu", cpu / 100.0),
                mem * 1e9,
                end - start,
            )
        )
    jobs.sort(key=lambda j: j.submit_time)
    if jobs:
        origin = jobs[0].submit_time
        jobs = [replace(j, submit_time=j.submit_time - origin) for j in jobs]
    return jobs


def _table_rows(
    path: str, columns: Sequence[str], table: str
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, row) of a headerless table (a header line, if there is one, is skipped)."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        for cells in reader:
            if not cells or cells[0] == columns[0]:
                continue
            if len(cells) != len(columns):
                raise TraceError(
                    f"{len(cells)} values; the {table} table has {len(columns)} "
                    f"columns ({', '.join(columns)})",
                    file=path,
                    line=reader.line_num,
                )
            yield reader.line_num, dict(zip(columns, cells))


def _queue_of(user: str, queues: Sequence[str]) -> str:
    if not queues:
        return f"queue-{user}"
    digest = hashlib.sha1(user.encode()).digest()
    return queues[int.from_bytes(digest[:4], "big") % len(queues)]
