"""Workload traces: the CSV format, its errors (line and column), Parquet, Alibaba's."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai.replay.trace import (
    Trace,
    TraceError,
    TraceJob,
    read_alibaba,
    read_csv,
    read_trace,
    write_csv,
)

HEADER = (
    "submit_time,job,queue,priority_class,pods,min_member,gpus_per_pod,cpu_per_pod,"
    "memory_per_pod,duration"
)


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_rows_become_jobs_with_quantities_in_canonical_units(tmp_path):
    path = write(
        tmp_path,
        HEADER + ",preemptibility,namespace\n"
        "0,train-1,team-a,train,4,2,1,500m,16Gi,3600,,ml\n"
        "12.5,infer-1,team-b,inference,1,1,0.5,2,1G,600,non-preemptible,\n",
    )
    first, second = read_trace(path)
    assert first == TraceJob(
        0.0, "train-1", "team-a", "train", 4, 2, 1.0, 500.0, 16 * 2**30, 3600.0, None, "ml"
    )
    assert first.line == 2 and first.key == "ml/train-1"
    assert second.gpus_per_pod == 0.5 and second.cpu_per_pod == 2000.0
    assert second.memory_per_pod == 1e9 and second.preemptibility == "non-preemptible"
    assert second.namespace == "default" and second.line == 3


def test_written_traces_read_back_the_same(tmp_path):
    jobs = [
        TraceJob(0.0, "a", "q", "train", 2, 2, 8.0, 4000.0, 64e9, 100.0),
        TraceJob(1.5, "b", "q", "inference", 1, 1, 0.25, 1000.0, 1e9, 7.5, "preemptible", "x"),
    ]
    path = str(tmp_path / "t.csv")
    write_csv(jobs, path)
    assert read_trace(path) == jobs


@pytest.mark.parametrize(
    ("row", "column", "message"),
    [
        ("0,j,q,train,2,1,lots,1,1Gi,10", "gpus_per_pod (column 7)", "invalid quantity 'lots'"),
        ("0,j,q,train,2,3,1,1,1Gi,10", "min_member (column 6)", "between 1 and pods (2)"),
        ("0,j,q,train,0,0,1,1,1Gi,10", "pods (column 5)", "at least 1"),
        ("-1,j,q,train,1,1,1,1,1Gi,10", "submit_time (column 1)", ">= 0"),
        ("0,j,q,train,1,1,1,1,1GB,10", "memory_per_pod (column 9)", "Ki, Mi, Gi"),
        ("0,j,q,train,1,1,1.5,1,1Gi,10", "gpus_per_pod (column 7)", "whole devices"),
        ("0,j,q,train,1,1,1,1,1Gi,soon", "duration (column 10)", "not a number of seconds"),
        ("0,,q,train,1,1,1,1,1Gi,10", "job (column 2)", "is empty"),
    ],
)
def test_a_malformed_row_names_its_line_and_column(tmp_path, row, column, message):
    path = write(tmp_path, f"{HEADER}\n0,ok,q,train,1,1,1,1,1Gi,10\n{row}\n")
    jobs = read_csv(path)
    assert next(jobs).job == "ok"  # rows before the bad one are read
    with pytest.raises(TraceError) as info:
        next(jobs)
    err = info.value
    assert (err.line, err.column) == (3, column)
    assert str(err).startswith(f"{path}, line 3, field {column}: ")
    assert message in str(err)


def test_row_shape_order_and_duplicates_are_checked(tmp_path):
    path = write(tmp_path, f"{HEADER}\n0,a,q,train,1,1,1,1,1Gi,10\n0,b,q\n")
    with pytest.raises(TraceError, match=r", line 3: 3 values where the header has 10 columns"):
        read_trace(path)
    path = write(tmp_path, f"{HEADER}\n5,a,q,train,1,1,1,1,1Gi,10\n4,b,q,train,1,1,1,1,1Gi,10\n")
    with pytest.raises(TraceError, match=r", line 3, field submit_time \(column 1\): 4 is earlier"):
        read_trace(path)
    path = write(tmp_path, f"{HEADER}\n0,a,q,train,1,1,1,1,1Gi,10\n1,a,q,train,1,1,1,1,1Gi,10\n")
    with pytest.raises(
        TraceError, match=r", line 3, field job \(column 2\): job default/a is also"
    ):
        read_trace(path)


def test_the_header_must_name_the_documented_columns(tmp_path):
    path = write(tmp_path, "submit_time,job,queue\n0,a,q\n")
    with pytest.raises(TraceError, match=r", line 1: missing column\(s\) priority_class, pods"):
        read_trace(path)
    path = write(tmp_path, HEADER + ",colour\n0,a,q,train,1,1,1,1,1Gi,10,red\n")
    with pytest.raises(TraceError, match=r", line 1: unknown column\(s\) colour"):
        read_trace(path)
    with pytest.raises(TraceError, match="the trace is empty"):
        read_trace(write(tmp_path, ""))
    with pytest.raises(TraceError, match="no such file"):
        Trace(str(tmp_path / "missing.csv"))


def test_parquet_traces_take_the_same_columns(tmp_path):
    pytest.importorskip("pyarrow")
    from kai.replay.trace import write_parquet

    jobs = [
        TraceJob(3.0, "b", "q", "train", 1, 1, 0.5, 1000.0, 1e9, 5.0),
        TraceJob(1.0, "a", "q", "train", 2, 2, 8.0, 4000.0, 64e9, 100.0, "preemptible", "x"),
    ]
    path = str(tmp_path / "t.parquet")
    write_parquet(jobs, path)
    assert read_trace(path) == sorted(jobs, key=lambda j: j.submit_time)

    import pyarrow as pa
    import pyarrow.parquet as pq

    bad = {name: [str(v)] for name, v in jobs[0].row().items()}
    bad["pods"] = ["two"]
    pq.write_table(pa.table(bad), str(tmp_path / "bad.parquet"))
    with pytest.raises(TraceError, match=r", row 1, field pods \(column 5\): 'two' is not"):
        read_trace(str(tmp_path / "bad.parquet"))


def test_alibaba_job_and_task_tables(tmp_path):
    # Headerless, as cluster-trace-gpu-v2020 ships them.
    (tmp_path / "pai_task_table.csv").write_text(
        # job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type
        "j1,worker,4.0,Terminated,1100,4700,800.0,29.3,100.0,V100\n"
        "j1,ps,1.0,Terminated,1100,4700,600.0,10.0,,MISC\n"
        "j2,tensorflow,1.0,Terminated,2050,2100,600.0,8.0,50.0,T4\n"
        "j3,worker,1.0,Failed,3000,3100,600.0,8.0,100.0,T4\n"
    )
    path = tmp_path / "pai_job_table.csv"
    path.write_text(
        # job_name,inst_id,user,status,start_time,end_time
        "j1,i1,alice,Terminated,1000,4700\n"
        "j2,i2,bob,Terminated,2000,2100\n"
        "j3,i3,bob,Failed,3000,3100\n"
    )
    j1, j2 = read_alibaba(str(path), queues=["a", "b", "c"])
    assert (j1.job, j1.submit_time, j1.pods, j1.min_member) == ("j1", 0.0, 4, 4)
    assert (j1.gpus_per_pod, j1.cpu_per_pod, j1.duration) == (1.0, 8000.0, 3600.0)
    assert j1.memory_per_pod == pytest.approx(29.3e9)
    assert (j2.submit_time, j2.gpus_per_pod, j2.duration) == (1000.0, 0.5, 50.0)
    assert j1.queue in ("a", "b", "c") and j2.queue in ("a", "b", "c")
    assert read_alibaba(str(path), queues=["a", "b", "c"])[0].queue == j1.queue  # stable
    # Trace() recognises the table by its name.
    assert [j.job for j in Trace(str(path), queues=["a"])] == ["j1", "j2"]
    (tmp_path / "pai_task_table.csv").unlink()
    with pytest.raises(TraceError, match="needs its task table"):
        read_alibaba(str(path))
