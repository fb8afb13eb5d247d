"""kai replay: the simulator's job lifecycle, its figures, and that incremental state
schedules as a state rebuilt from manifests would."""

from __future__ import annotations

import gc
from datetime import timedelta

import pytest

from kai.api.model import TaskStatus
from kai.api.objects import ClusterObjects, PodGroupObject, PodObject
from kai.engine import Snapshot, run_session
from kai.replay import Replay, WorkloadSpec, generate
from kai.replay.report import percentiles, summary
from kai.replay.trace import TraceJob
from kai.snapshot.builder import GPU_FRACTION_ANNOTATION, KAI_SCHEDULER_NAME
from kai.snapshot.loader import load_text

QUEUE = """
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {name}}}
spec:
  {parent}
  resources:
    gpu: {{quota: {quota}, limit: -1, overQuotaWeight: 1}}
    cpu: {{quota: -1, limit: -1, overQuotaWeight: 1}}
    memory: {{quota: -1, limit: -1, overQuotaWeight: 1}}
"""

NODE = """
---
apiVersion: v1
kind: Node
metadata: {{name: {name}}}
status:
  allocatable: {{cpu: '64', memory: 512Gi, pods: '110', nvidia.com/gpu: '{gpus}'}}
  conditions: [{{type: Ready, status: 'True'}}]
"""

PRIORITY_CLASSES = """
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: train}
value: 50
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: inference}
value: 125
"""


def cluster(nodes: int = 1, gpus: int = 8, queues: dict[str, float] | None = None):
    """``nodes`` nodes of ``gpus`` GPUs and leaf queues {name: GPU quota} under root."""
    queues = {"a": 0, "b": 8} if queues is None else queues
    text = PRIORITY_CLASSES
    text += "".join(NODE.format(name=f"n{i}", gpus=gpus) for i in range(nodes))
    text += QUEUE.format(name="root", parent="", quota=-1)
    for name, quota in queues.items():
        text += QUEUE.format(name=name, parent="parentQueue: root", quota=quota)
    return load_text(text, "cluster.yaml")


def job(t, name, queue, gpus, duration, pods=1, cls="train", min_member=None) -> TraceJob:
    return TraceJob(
        t, name, queue, cls, pods, pods if min_member is None else min_member, gpus, 1000.0,
        1e9, duration,
    )  # fmt: skip


def test_a_job_runs_from_the_first_session_after_its_submission_for_its_duration():
    result = Replay(cluster(), [job(5, "j", "a", 4, 100)], period=10).run()
    rec = result.records["default/j"]
    assert rec.first_start == 10  # the first session at or after t=5
    assert rec.finish == 110
    assert rec.gpu_seconds == pytest.approx(4 * 100)
    assert result.complete
    # Nothing happens between the start and the finish: those periods are jumped over.
    assert result.sessions == 2
    assert result.periods == 12  # the periods from 0 to 110 s


def test_an_evicted_job_loses_its_work_keeps_its_history_and_restarts():
    # "long" holds the node over quota; "short" arrives in a queue that deserves the
    # node and reclaims it.  "long" ran 200 s: that work is lost, and it runs its whole
    # duration again once "short" is done.
    trace = [job(0, "long", "a", 8, 1000), job(200, "short", "b", 8, 100)]
    result = Replay(cluster(), trace, period=10).run()
    long, short = result.records["default/long"], result.records["default/short"]
    assert long.first_start == 0
    assert long.evictions == 1
    assert long.lost_gpu_seconds == pytest.approx(8 * 200)
    (eviction,) = result.evictions
    assert (eviction.time, eviction.job, eviction.action) == (200, "default/long", "reclaim")
    # The reclaimer is pipelined at 200 and binds once the victim is gone.
    assert short.first_start == 210 and short.finish == 310
    assert long.run_start == 310 and long.finish == 1310
    assert long.gpu_seconds == pytest.approx(8 * 200 + 8 * 1000)


def test_summary_figures_of_a_hand_computed_run():
    trace = [job(0, "long", "a", 8, 1000), job(200, "short", "b", 8, 100)]
    doc = summary(Replay(cluster(), trace, period=10).run())
    overall = doc["overall"]
    assert overall["jobs_finished"] == 2
    # JCTs: long 1310 (submitted 0), short 110 (submitted 200, finished 310).
    assert overall["jct_seconds"] == {"p50": 710.0, "p90": 1190.0, "p99": 1298.0}
    # Queueing delays: long 0, short 10.
    assert overall["queueing_delay_seconds"]["p50"] == 5.0
    # Slowdowns: 1310 / 1000 and 110 / 100.
    assert overall["slowdown"]["p50"] == pytest.approx((1.31 + 1.1) / 2)
    assert overall["gpu_hours_allocated"] == pytest.approx((9600 + 800) / 3600, abs=1e-3)
    assert overall["gpu_hours_lost_to_eviction"] == pytest.approx(1600 / 3600, abs=1e-3)
    assert overall["evictions_by_action"] == {"reclaim": 1}
    assert overall["gpu_utilization"] == pytest.approx((9600 + 800) / (8 * 1310), abs=1e-4)
    assert doc["queues"]["a"]["evictions"] == 1 and doc["queues"]["b"]["evictions"] == 0
    assert doc["queues"]["b"]["jct_seconds"]["p50"] == 110.0
    assert doc["priority_classes"]["train"]["jobs_finished"] == 2
    assert doc["run"]["complete"] is True


def test_percentiles_interpolate_between_ranks():
    assert percentiles([]) == {"p50": None, "p90": None, "p99": None}
    assert percentiles([10.0]) == {"p50": 10.0, "p90": 10.0, "p99": 10.0}
    assert percentiles([0.0, 10.0, 20.0, 30.0, 40.0]) == {"p50": 20.0, "p90": 36.0, "p99": 39.6}


def test_a_gang_starts_only_when_all_its_members_fit():
    # Two 8-GPU nodes; a 3-pod gang of 8-GPU pods never fits, a 2-pod gang does.
    trace = [job(0, "big", "a", 8, 50, pods=3), job(0, "pair", "a", 8, 50, pods=2)]
    result = Replay(cluster(nodes=2), trace, period=10).run()
    assert result.records["default/pair"].finish == 50
    assert result.records["default/big"].first_start is None
    # Nothing more can happen: the replay ends instead of running empty periods forever.
    assert result.complete and result.sessions <= 3


def test_fractional_jobs_share_a_device():
    # Inference is non-preemptible: it runs within its queue's deserved quota (b's).
    trace = [job(0, f"half-{i}", "b", 0.5, 60, cls="inference") for i in range(4)]
    result = Replay(cluster(nodes=1, gpus=1), trace, period=10).run()
    starts = sorted(r.first_start for r in result.records.values())
    assert starts == [0, 0, 60, 60]  # two halves per device at a time
    assert result.timeline[0].allocated["b"] == 1.0


def test_the_clock_jumps_over_idle_periods_to_the_next_arrival():
    trace = [job(0, "first", "a", 1, 10), job(86_400, "second", "a", 1, 10)]
    result = Replay(cluster(), trace, period=10).run()
    assert result.records["default/second"].first_start == 86_400
    assert result.sessions <= 4
    assert result.periods == 8642


def test_until_stops_the_replay_and_counts_allocation_up_to_then():
    result = Replay(cluster(), [job(0, "j", "a", 2, 10_000)], period=10, until=100).run()
    rec = result.records["default/j"]
    assert rec.finish is None
    assert result.end == 0 or rec.gpu_seconds == pytest.approx(2 * result.end)


def test_an_unknown_queue_in_the_trace_is_an_error_naming_the_job():
    from kai.api.errors import InputError

    with pytest.raises(InputError, match=r"trace job default/j.*queue 'nope'"):
        Replay(cluster(), [job(0, "j", "nope", 1, 10)]).run()


def test_min_runtime_protects_a_victim_until_it_runs_out():
    objects = load_text(_cluster_text(), "cluster.yaml")
    trace = [job(0, "long", "a", 8, 1000), job(100, "short", "b", 8, 100)]
    result = Replay(objects, trace, period=10).run()
    # Protected until 300 s after its start: reclaimed at 300, not at 100.
    (eviction,) = result.evictions
    assert eviction.time == 300
    assert result.protections["reclaim"] >= 1
    assert result.protected_jobs["reclaim"] == {"default/long"}
    doc = summary(result)
    assert doc["overall"]["min_runtime_protections"]["reclaim"]["jobs"] == 1


def _cluster_text() -> str:
    text = PRIORITY_CLASSES + NODE.format(name="n0", gpus=8)
    text += QUEUE.format(name="root", parent="", quota=-1)
    text += QUEUE.format(name="a", parent="parentQueue: root", quota=0)
    text += QUEUE.format(name="b", parent="parentQueue: root", quota=8)
    text += "---\napiVersion: kai.scheduler/v1\nkind: SchedulerConfiguration\n"
    text += "reclaimMinRuntime: 300s\n"
    return text


# ----------------------------------------------------------- incremental == rebuilt
def _rebuilt_objects(replay: Replay) -> ClusterObjects:
    """The replay's current cluster as a snapshot of manifests would give it."""
    cluster = replay.cluster
    names = replay.state.nodes.names
    pods, groups = [], []
    for key, job in replay._live.items():
        trace = replay.records[key].trace
        created_at = replay.start + timedelta(seconds=trace.submit_time)
        groups.append(
            PodGroupObject(
                trace.job,
                trace.namespace,
                uid=key,
                creation_timestamp=created_at,
                min_member=trace.min_member,
                queue=trace.queue,
                priority_class_name=trace.priority_class,
                preemptibility=trace.preemptibility,
                last_start_timestamp=job.last_start_timestamp,
            )
        )
        annotations = {"pod-group-name": trace.job}
        if 0 < trace.gpus_per_pod < 1:
            annotations[GPU_FRACTION_ANNOTATION] = repr(trace.gpus_per_pod)
        requests = {"cpu": trace.cpu_per_pod, "memory": trace.memory_per_pod}
        if trace.gpus_per_pod >= 1:
            requests["nvidia.com/gpu"] = trace.gpus_per_pod
        for task in job.tasks:
            running = task.status is TaskStatus.RUNNING
            labels = {}
            if running and task.gpu_group is not None:
                labels["runai-gpu-group"] = task.gpu_group
            pods.append(
                PodObject(
                    task.name,
                    task.namespace,
                    uid=task.uid,
                    labels=labels,
                    annotations=annotations,
                    creation_timestamp=created_at,
                    scheduler_name=KAI_SCHEDULER_NAME,
                    node_name=names[task.node] if running else None,
                    priority_class_name=trace.priority_class,
                    requests=requests,
                    phase="Running" if running else "Pending",
                )
            )
    return ClusterObjects(
        nodes=cluster.nodes,
        pods=pods,
        pod_groups=groups,
        queues=cluster.queues,
        priority_classes=cluster.priority_classes,
        config=cluster.config,
    )


def _decisions(decisions) -> list[tuple[str, str, str | None]]:
    out = []
    for d in decisions:
        pod = d.pod or (f"{d.task.namespace}/{d.task.name}" if d.task is not None else "")
        out.append((d.type, pod, d.node))
    return sorted(out)


def test_incremental_sessions_decide_what_a_rebuilt_snapshot_decides():
    spec = WorkloadSpec(
        jobs=150,
        span=4 * 3600,
        total_gpus=32,
        queues=("a", "b", "c"),
        load=1.3,  # a backlog: allocate, reclaim and preempt all have work
        cpu_per_gpu=1000,
        memory_per_gpu=1e9,
    )
    trace = generate(spec, seed=7)
    objects = cluster(nodes=4, gpus=8, queues={"a": 8, "b": 8, "c": 0})
    replay = Replay(objects, trace, period=30)
    compared = decided = 0
    for _ in range(120):
        now = replay.now
        replay._finish_jobs(now)
        replay._arrive(now)
        if not replay._live:
            if not replay.step():
                break
            continue
        rebuilt = run_session(
            Snapshot(_rebuilt_objects(replay)),
            config=replay.config,
            now=replay.start + timedelta(seconds=now),
        )
        if not replay.step():
            break
        captured = [replay.last_decisions]
        assert _decisions(captured[0]) == _decisions(rebuilt.decisions), f"at t={now}"
        compared += 1
        decided += bool(captured[0])
    assert compared > 20 and decided > 10
    assert replay.result.evictions  # the comparison covered evictions too


# ----------------------------------------------------------- memory
def test_a_long_replay_leaves_no_garbage_cycles_behind_its_sessions():
    """Replay.run keeps the garbage collector off (sessions make many short-lived
    objects): what a session leaves must be freed by reference counting, or a week's
    replay grows by every session's plugins, pools and session object."""
    text = PRIORITY_CLASSES + "".join(NODE.format(name=f"n{i}", gpus=8) for i in range(4))
    text += QUEUE.format(name="root", parent="", quota=-1)
    for name, quota in {"a": 8, "b": 8, "c": 0}.items():
        text += QUEUE.format(name=name, parent="parentQueue: root", quota=quota)
    text += "---\napiVersion: kai.scheduler/v1\nkind: SchedulerConfiguration\n"
    text += "reclaimMinRuntime: 60s\n"
    spec = WorkloadSpec(
        jobs=120,
        span=3 * 3600,
        total_gpus=32,
        queues=("a", "b", "c"),
        load=1.3,  # a backlog: every eviction action searches
        cpu_per_gpu=1000,
        memory_per_gpu=1e9,
    )
    replay = Replay(load_text(text, "cluster.yaml"), generate(spec, seed=3), period=30)
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        result = replay.run()
        assert result.sessions > 100 and result.evictions and result.protections["reclaim"]
        assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()


# ----------------------------------------------------------- synthetic workloads
def test_synthetic_workloads_are_seeded_and_shaped():
    spec = WorkloadSpec(jobs=2000, span=7 * 86400, total_gpus=800, queues=("a", "b"))
    first = generate(spec, seed=3)
    assert generate(spec, seed=3) == first
    assert generate(spec, seed=4) != first
    assert len(first) == 2000
    times = [j.submit_time for j in first]
    assert times == sorted(times) and 0 <= times[0] and times[-1] <= spec.span
    for j in first:
        assert j.gpus_per_pod == 0.5 or (j.gpus_per_pod * j.pods) in (1, 2, 4, 8, 16, 32, 64, 128)
        assert spec.min_duration <= j.duration <= spec.max_duration
    durations = sorted(j.duration for j in first)
    # Heavy-tailed: the slowest 1% take far longer than the median job.
    assert durations[int(0.99 * len(durations))] > 10 * durations[len(durations) // 2]
    # Diurnal: more arrivals in the afternoon than before dawn (weekdays).
    afternoon = sum(1 for t in times if 12 <= (t % 86400) / 3600 < 18 and t < 5 * 86400)
    night = sum(1 for t in times if 0 <= (t % 86400) / 3600 < 6 and t < 5 * 86400)
    assert afternoon > 1.5 * night
    # The offered GPU demand is the asked load of the capacity.
    demand = sum(j.gpus * j.duration for j in first) / (spec.total_gpus * spec.span)
    assert demand == pytest.approx(spec.load, rel=0.1)
