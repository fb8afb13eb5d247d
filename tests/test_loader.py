"""Tests of kai.snapshot.loader: manifests -> ClusterObjects, and every input error."""

from __future__ import annotations

import codecs
import copy
import json
import pickle
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from kai.api.errors import ConfigError, InputError
from kai.api.objects import (
    EMPTY_MAP,
    NodeSelectorTerm,
    OwnerReference,
    PluginOption,
    QueueResource,
    SelectorRequirement,
    Source,
    Taint,
    Toleration,
)
from kai.engine import Snapshot, run_session
from kai.snapshot.loader import load_config_file, load_files, load_objects, load_text

GI = 1024.0**3
UTC = timezone.utc


def y(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def load(text: str, file: str = "snap.yaml"):
    return load_text(y(text), file)


def error(text: str, file: str = "snap.yaml") -> InputError:
    with pytest.raises(InputError) as info:
        load_text(y(text), file)
    return info.value


def pod_doc(name="p", ns="default", **spec) -> dict:
    spec.setdefault("containers", [{"name": "c"}])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def queue_doc(name, parent=None, **spec) -> dict:
    if parent is not None:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


# --------------------------------------------------------------------------- Node


NODE = """
apiVersion: v1
kind: Node
metadata:
  name: n1
  labels: {kai.scheduler/node-pool: pool-a, nvidia.com/gpu.count: 8, enabled: true}
  annotations: {note: hello}
spec:
  unschedulable: true
  taints:
  - {key: nvidia.com/gpu, value: present, effect: NoSchedule}
  - {key: dedicated, effect: NoExecute}
status:
  allocatable: {cpu: 7500m, memory: 64Gi, nvidia.com/gpu: "8", pods: 110,
                example.com/foo: 3}
  capacity: {cpu: "8"}
  conditions:
  - {type: Ready, status: "True"}
  - {type: MemoryPressure, status: "True"}
  - {type: DiskPressure, status: "False"}
  - {type: NetworkUnavailable, status: "True"}
"""


def test_node_fields():
    c = load(NODE)
    (n,) = c.nodes
    assert n.name == "n1"
    assert n.labels == {
        "kai.scheduler/node-pool": "pool-a",
        "nvidia.com/gpu.count": "8",
        "enabled": "true",
    }
    assert n.annotations == {"note": "hello"}
    assert n.unschedulable is True
    assert n.taints == [
        Taint("nvidia.com/gpu", "present", "NoSchedule"),
        Taint("dedicated", "", "NoExecute"),
    ]
    assert n.allocatable == {
        "cpu": 7500.0,
        "memory": 64 * GI,
        "nvidia.com/gpu": 8.0,
        "pods": 110.0,
        "example.com/foo": 3.0,
    }
    assert n.ready is True
    assert n.pressure_conditions == ["MemoryPressure", "NetworkUnavailable"]
    assert n.source == Source("snap.yaml", 0)


def test_node_ready_variants():
    base = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}
    assert load_objects([base]).nodes[0].ready is True
    for status, ready in [("True", True), ("False", False), ("Unknown", False)]:
        doc = dict(base, status={"conditions": [{"type": "Ready", "status": status}]})
        assert load_objects([doc]).nodes[0].ready is ready
    doc = dict(base, status={"conditions": [{"type": "MemoryPressure", "status": "False"}]})
    n = load_objects([doc]).nodes[0]
    assert n.ready is True and n.pressure_conditions == []


def test_node_allocatable_defaults_to_capacity():
    doc = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n"},
        "status": {"capacity": {"cpu": "4", "memory": "1Gi"}},
    }
    assert load_objects([doc]).nodes[0].allocatable == {"cpu": 4000.0, "memory": GI}


def test_node_bad_allocatable():
    e = error("""
        apiVersion: v1
        kind: Node
        metadata: {name: n1}
        status: {allocatable: {nvidia.com/gpu: lots}}
    """)
    assert e.file == "snap.yaml" and e.document == 0
    assert e.obj == "Node n1"
    assert e.field == "status.allocatable[nvidia.com/gpu]"
    assert "lots" in str(e) and "snap.yaml" in str(e) and "Node n1" in str(e)


def test_node_negative_allocatable():
    e = error("""
        apiVersion: v1
        kind: Node
        metadata: {name: n1}
        status: {allocatable: {cpu: "-1"}}
    """)
    assert e.field == "status.allocatable.cpu"
    assert "negative" in e.message


# --------------------------------------------------------------------------- Pod


POD = """
apiVersion: v1
kind: Pod
metadata:
  name: train-0
  namespace: team-a
  uid: uid-1
  labels: {kai.scheduler/queue: q1, runai-gpu-group: g1}
  annotations: {pod-group-name: pg-1, gpu-fraction: 0.5}
  ownerReferences:
  - {apiVersion: batch/v1, kind: Job, name: train, uid: job-uid, controller: true}
  - {apiVersion: v1, kind: ConfigMap, name: cm}
  creationTimestamp: "2024-05-01T10:00:00Z"
  deletionTimestamp: 2024-05-01T11:00:00+01:00
spec:
  schedulerName: kai-scheduler
  nodeName: n1
  priority: 75
  priorityClassName: build-preemptible
  nodeSelector: {disk: ssd}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: zone, operator: In, values: [a, b]}
          matchFields:
          - {key: metadata.name, operator: NotIn, values: [n9]}
        - matchExpressions:
          - {key: gpu, operator: Exists}
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 10
        preference:
          matchExpressions:
          - {key: rank, operator: Gt, values: [3]}
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  - {key: a, value: b}
  containers:
  - name: main
    resources:
      requests: {cpu: 500m, memory: 1Gi}
      limits: {cpu: "1", memory: 2Gi, nvidia.com/gpu: 1}
  - name: side
    resources:
      requests: {cpu: 250m}
      limits: {cpu: 250m}
status:
  phase: Running
  nominatedNodeName: n2
  startTime: "2024-05-01T10:05:00Z"
  conditions:
  - {type: PodScheduled, status: "True"}
  - {type: Ready, status: "False"}
"""


def test_pod_fields():
    (p,) = load(POD).pods
    assert (p.name, p.namespace, p.uid, p.key) == ("train-0", "team-a", "uid-1", "team-a/train-0")
    assert p.labels == {"kai.scheduler/queue": "q1", "runai-gpu-group": "g1"}
    assert p.annotations == {"pod-group-name": "pg-1", "gpu-fraction": "0.5"}
    assert p.owner_references == (
        OwnerReference("Job", "train", "job-uid", True),
        OwnerReference("ConfigMap", "cm", "", False),
    )
    assert p.creation_timestamp == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert p.deletion_timestamp == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert p.scheduler_name == "kai-scheduler"
    assert p.node_name == "n1"
    assert p.priority == 75
    assert p.priority_class_name == "build-preemptible"
    assert p.node_selector == {"disk": "ssd"}
    assert p.required_node_affinity == [
        NodeSelectorTerm(
            match_expressions=(SelectorRequirement("zone", "In", ("a", "b")),),
            match_fields=(SelectorRequirement("metadata.name", "NotIn", ("n9",)),),
        ),
        NodeSelectorTerm(match_expressions=(SelectorRequirement("gpu", "Exists"),)),
    ]
    (pref,) = p.preferred_node_affinity
    assert pref.weight == 10
    assert pref.preference.match_expressions == (SelectorRequirement("rank", "Gt", ("3",)),)
    assert p.tolerations == (
        Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),
        Toleration("a", "Equal", "b", ""),
    )
    # gpu has a limit but no request: the request defaults to the limit
    assert p.requests == {"cpu": 750.0, "memory": GI, "nvidia.com/gpu": 1.0}
    # cpu is limited in every container; memory and gpu only in one
    assert p.limits == {"cpu": 1250.0}
    assert p.phase == "Running"
    assert p.nominated_node_name == "n2"
    assert p.start_time == datetime(2024, 5, 1, 10, 5, tzinfo=UTC)
    assert p.conditions == {"PodScheduled": "True", "Ready": "False"}


def test_pod_defaults():
    (p,) = load_objects([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}]).pods
    assert p.namespace == "default"
    assert p.scheduler_name == "default-scheduler"
    assert p.node_name is None and p.priority is None and p.priority_class_name is None
    assert p.required_node_affinity is None and p.preferred_node_affinity == ()
    assert p.requests == {} and p.limits == {}
    assert p.phase == "Pending" and p.conditions == {}
    assert p.start_time is None and p.creation_timestamp is None
    assert p.source == Source("<python>", 0)


def test_parsed_pods_share_their_empty_maps_and_sequences_read_only():
    # 100,000 pods cost no dictionary or list per empty field, and no session can
    # change what the snapshot says through them.
    a, b = load_objects(
        [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {}}}
            for name in ("a", "b")
        ]
    ).pods
    for field in ("labels", "annotations", "node_selector", "conditions", "condition_times"):
        assert getattr(a, field) is getattr(b, field), field
        assert getattr(a, field) == {}
    for field in ("owner_references", "tolerations", "preferred_node_affinity", "scheduling_gates"):
        assert getattr(a, field) == ()
    with pytest.raises(TypeError):
        a.labels["team"] = "x"  # type: ignore[index]


def test_pod_empty_strings_mean_unset():
    doc = pod_doc(nodeName="", schedulerName="", priorityClassName="")
    (p,) = load_objects([doc]).pods
    assert p.node_name is None and p.priority_class_name is None
    assert p.scheduler_name == "default-scheduler"


def test_pod_required_affinity_empty_terms_is_not_none():
    doc = pod_doc(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
            }
        }
    )
    assert load_objects([doc]).pods[0].required_node_affinity == []


def test_pod_requests_init_containers_and_overhead():
    doc = pod_doc(
        initContainers=[
            {"name": "i1", "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}},
            {"name": "i2", "resources": {"requests": {"cpu": "500m", "memory": "4Gi"}}},
            {"name": "i3", "resources": {"limits": {"example.com/dev": 2}}},
        ],
        containers=[
            {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        ],
        overhead={"cpu": "100m", "memory": "64Mi"},
    )
    (p,) = load_objects([doc]).pods
    assert p.requests == {
        "cpu": 2000.0 + 100.0,  # init 2 cores > containers 1.5 cores
        "memory": 4 * GI + 64 * 1024.0**2,  # init 4Gi > containers 2Gi
        "example.com/dev": 2.0,  # only an init container asks for it (via its limit)
    }


def test_pod_requests_sidecar_init_containers():
    doc = pod_doc(
        initContainers=[
            {
                "name": "sidecar",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "200m"}},
            },
            {"name": "init", "resources": {"requests": {"cpu": "1"}}},
        ],
        containers=[{"name": "a", "resources": {"requests": {"cpu": "500m"}}}],
    )
    # init phase: 1 + 0.2 sidecar = 1.2; running: 0.5 + 0.2 = 0.7
    assert load_objects([doc]).pods[0].requests == {"cpu": 1200.0}


def test_pod_request_explicit_zero_kept_and_limit_does_not_override_request():
    doc = pod_doc(
        containers=[
            {
                "name": "a",
                "resources": {"requests": {"cpu": 0, "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            }
        ]
    )
    (p,) = load_objects([doc]).pods
    assert p.requests == {"cpu": 0.0, "memory": GI}
    assert p.limits == {"memory": 2 * GI}


def test_pod_cpu_rounds_up_to_millicores():
    doc = pod_doc(containers=[{"name": "a", "resources": {"requests": {"cpu": "1n"}}}])
    assert load_objects([doc]).pods[0].requests == {"cpu": 1.0}


def test_pod_bad_request_quantity():
    doc = pod_doc(
        name="p1",
        ns="ns1",
        containers=[{"name": "a"}, {"name": "b", "resources": {"requests": {"memory": "1GB"}}}],
    )
    with pytest.raises(InputError) as info:
        load_objects(
            [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}, doc], file="mem.py"
        )
    e = info.value
    assert (e.file, e.document, e.obj) == ("mem.py", 1, "Pod ns1/p1")
    assert e.field == "spec.containers[1].resources.requests.memory"
    assert "1GB" in e.message


def test_pod_negative_limit():
    doc = pod_doc(containers=[{"name": "a", "resources": {"limits": {"nvidia.com/gpu": -1}}}])
    with pytest.raises(InputError) as info:
        load_objects([doc])
    assert info.value.field == "spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert "negative" in info.value.message


def test_pod_bad_init_container_and_overhead():
    doc = pod_doc(initContainers=[{"resources": {"requests": {"cpu": "x"}}}])
    with pytest.raises(InputError) as info:
        load_objects([doc])
    assert info.value.field == "spec.initContainers[0].resources.requests.cpu"
    doc = pod_doc(overhead={"cpu": "-5"})
    with pytest.raises(InputError) as info:
        load_objects([doc])
    assert info.value.field == "spec.overhead.cpu"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"priority": "high"}, "spec.priority"),
        ({"containers": {"a": 1}}, "spec.containers"),
        (
            {"containers": [{"resources": {"requests": ["1"]}}]},
            "spec.containers[0].resources.requests",
        ),
        ({"tolerations": [{"key": ["x"]}]}, "spec.tolerations[0].key"),
        ({"nodeSelector": {"a": {"b": 1}}}, "spec.nodeSelector.a"),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "k", "operator": "Equals"}]}
                            ]
                        }
                    }
                }
            },
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
    ],
)
def test_pod_bad_fields(spec, field):
    with pytest.raises(InputError) as info:
        load_objects([pod_doc(name="p", ns="n", **spec)])
    assert info.value.field == field
    assert info.value.obj == "Pod n/p"


def test_pod_bad_timestamps():
    doc = pod_doc()
    doc["metadata"]["creationTimestamp"] = "yesterday"
    with pytest.raises(InputError) as info:
        load_objects([doc])
    assert info.value.field == "metadata.creationTimestamp"
    doc = pod_doc()
    doc["status"] = {"startTime": "2024-05-01"}
    with pytest.raises(InputError) as info:
        load_objects([doc])
    assert info.value.field == "status.startTime"


def test_pod_owner_reference_needs_kind_and_name():
    doc = pod_doc()
    doc["metadata"]["ownerReferences"] = [{"kind": "Job"}]
    with pytest.raises(InputError) as info:
        load_objects([doc])
    assert info.value.field == "metadata.ownerReferences[0].name"


# --------------------------------------------------------------------------- PodGroup


PODGROUP = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata:
  name: pg-1
  namespace: team-a
  uid: pg-uid
  labels: {kai.scheduler/queue: q1}
  annotations:
    kai.scheduler/last-start-timestamp: "2024-05-01T10:00:00Z"
    kai.scheduler/stale-podgroup-timestamp: 2024-05-01T10:30:00.25Z
    kai.scheduler/last-eviction-timestamp: "2024-05-01T09:00:00+02:00"
  ownerReferences: [{apiVersion: batch/v1, kind: Job, name: train, uid: j}]
  creationTimestamp: "2024-05-01T08:00:00Z"
spec:
  minMember: 4
  queue: q1
  priorityClassName: train
  preemptibility: sometimes
  stalenessGracePeriod: -1s
  preemptionDelay: 1h30m
"""


def test_pod_group_fields():
    (pg,) = load(PODGROUP).pod_groups
    assert (pg.name, pg.namespace, pg.uid, pg.key) == ("pg-1", "team-a", "pg-uid", "team-a/pg-1")
    assert pg.labels == {"kai.scheduler/queue": "q1"}
    assert pg.owner_references == (OwnerReference("Job", "train", "j", False),)
    assert pg.creation_timestamp == datetime(2024, 5, 1, 8, tzinfo=UTC)
    assert pg.min_member == 4
    assert pg.queue == "q1"
    assert pg.priority_class_name == "train"
    assert pg.preemptibility == "sometimes"  # raw, not validated here
    assert pg.staleness_grace_period == -1.0
    assert pg.preemption_delay == 5400.0
    assert pg.last_start_timestamp == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert pg.stale_timestamp == datetime(2024, 5, 1, 10, 30, 0, 250000, tzinfo=UTC)
    assert pg.last_eviction_timestamp == datetime(2024, 5, 1, 7, tzinfo=UTC)
    # an unquoted timestamp in an annotation is still a string annotation
    assert pg.annotations["kai.scheduler/stale-podgroup-timestamp"].startswith("2024-05-01T10:30")


def test_pod_group_alias_group_and_any_version():
    docs = [
        {
            "apiVersion": "scheduling.kai.nvidia.com/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "a"},
            "spec": {"minMember": 0},
        },
        {"apiVersion": "scheduling.run.ai/v2", "kind": "PodGroup", "metadata": {"name": "b"}},
        {"apiVersion": "other.io/v1", "kind": "PodGroup", "metadata": {"name": "c"}},
    ]
    c = load_objects(docs)
    assert [pg.name for pg in c.pod_groups] == ["a", "b"]
    assert c.pod_groups[0].min_member == 0 and c.pod_groups[0].namespace == "default"
    assert c.pod_groups[1].min_member is None and c.pod_groups[1].staleness_grace_period is None
    assert [o.kind for o in c.others] == ["PodGroup"]  # another group's PodGroup is generic


@pytest.mark.parametrize("bad", [-1, "two", 1.5, True])
def test_pod_group_bad_min_member(bad):
    doc = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ns"},
        "spec": {"minMember": bad},
    }
    with pytest.raises(InputError) as info:
        load_objects([doc])
    assert info.value.field == "spec.minMember"
    assert info.value.obj == "PodGroup ns/pg"


@pytest.mark.parametrize(
    "key",
    [
        "kai.scheduler/last-start-timestamp",
        "kai.scheduler/stale-podgroup-timestamp",
        "kai.scheduler/last-eviction-timestamp",
    ],
)
def test_pod_group_bad_annotation_timestamp(key):
    doc = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ns", "annotations": {key: "not-a-time"}},
    }
    with pytest.raises(InputError) as info:
        load_objects([doc], file="f.yaml")
    e = info.value
    assert e.field == f"metadata.annotations[{key}]"
    assert (e.file, e.document, e.obj) == ("f.yaml", 0, "PodGroup ns/pg")
    assert "not-a-time" in str(e)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"stalenessGracePeriod": "soon"}, "spec.stalenessGracePeriod"),
        ({"preemptionDelay": "-5m"}, "spec.preemptionDelay"),
        ({"preemptionDelay": "10"}, "spec.preemptionDelay"),
    ],
)
def test_pod_group_bad_durations(spec, field):
    doc = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg"},
        "spec": spec,
    }
    with pytest.raises(InputError) as info:
        load_objects([doc])
    assert info.value.field == field


def test_pod_group_numeric_durations_are_seconds():
    doc = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg"},
        "spec": {"stalenessGracePeriod": 30, "preemptionDelay": 0},
    }
    (pg,) = load_objects([doc]).pod_groups
    assert pg.staleness_grace_period == 30.0 and pg.preemption_delay == 0.0


# --------------------------------------------------------------------------- Queue


QUEUES = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: root, labels: {kai.scheduler/node-pool: a}}
spec:
  displayName: Root queue
  resources:
    gpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    cpu: {quota: 8000, limit: "16000", overQuotaWeight: "2.5"}
    memory: {quota: 1024, limit: -1}
  preemptMinRuntime: 5m
  reclaimMinRuntime: 1h
---
apiVersion: scheduling.kai.nvidia.com/v2
kind: Queue
metadata: {name: child}
spec:
  parentQueue: root
  priority: 7
  resources:
    gpu: {quota: 2.5}
"""


def test_queue_fields():
    root, child = load(QUEUES).queues
    assert root.name == "root" and root.parent is None and root.priority == 100
    assert root.display_name == "Root queue"
    assert root.labels == {"kai.scheduler/node-pool": "a"}
    assert root.resources == {
        "gpu": QueueResource(-1.0, -1.0, 1.0),
        "cpu": QueueResource(8000.0, 16000.0, 2.5),
        "memory": QueueResource(1024 * 1_000_000.0, -1.0, 0.0),
    }
    assert root.preempt_min_runtime == 300.0 and root.reclaim_min_runtime == 3600.0
    assert root.source == Source("snap.yaml", 0)
    assert child.parent == "root" and child.priority == 7
    assert child.resources == {"gpu": QueueResource(2.5, 0.0, 0.0)}  # cpu/memory omitted
    assert child.preempt_min_runtime is None and child.reclaim_min_runtime is None
    assert child.source == Source("snap.yaml", 1)


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"gpu": {"quota": -2}}, "spec.resources.gpu.quota"),
        ({"cpu": {"limit": -0.5}}, "spec.resources.cpu.limit"),
        ({"memory": {"overQuotaWeight": -1}}, "spec.resources.memory.overQuotaWeight"),
        ({"gpu": {"quota": "lots"}}, "spec.resources.gpu.quota"),
        ({"gpu": {"quota": True}}, "spec.resources.gpu.quota"),
        ({"gpu": {"limit": ".nan"}}, "spec.resources.gpu.limit"),
        ({"gpu": 4}, "spec.resources.gpu"),
    ],
)
def test_queue_bad_resources(resources, field):
    with pytest.raises(InputError) as info:
        load_objects([queue_doc("q1", resources=resources)], file="q.yaml")
    e = info.value
    assert (e.file, e.document, e.obj, e.field) == ("q.yaml", 0, "Queue q1", field)
    assert "q.yaml, document 0, Queue q1, field " + field in str(e)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"preemptMinRuntime": "-1m"}, "spec.preemptMinRuntime"),
        ({"reclaimMinRuntime": "forever"}, "spec.reclaimMinRuntime"),
        ({"priority": "high"}, "spec.priority"),
    ],
)
def test_queue_bad_spec(spec, field):
    with pytest.raises(InputError) as info:
        load_objects([queue_doc("q1", **spec)])
    assert info.value.field == field


def test_queue_missing_parent():
    docs = [queue_doc("a"), queue_doc("b", parent="nope")]
    with pytest.raises(InputError) as info:
        load_objects(docs, file="qs.yaml")
    e = info.value
    assert (e.file, e.document, e.obj, e.field) == ("qs.yaml", 1, "Queue b", "spec.parentQueue")
    assert "nope" in e.message and "does not exist" in e.message


def test_queue_cycle():
    docs = [
        queue_doc("root"),
        queue_doc("a", parent="c"),
        queue_doc("b", parent="a"),
        queue_doc("c", parent="b"),
        queue_doc("leaf", parent="a"),
    ]
    with pytest.raises(InputError) as info:
        load_objects(docs)
    e = info.value
    assert "cycle" in e.message
    for q in ("a", "b", "c"):
        assert q in e.message
    assert "root" not in e.message and "leaf" not in e.message
    assert e.obj == "Queue a" and e.field == "spec.parentQueue"


def test_queue_self_parent_is_a_cycle():
    with pytest.raises(InputError, match="cycle"):
        load_objects([queue_doc("self", parent="self")])


def test_queue_tree_ok_across_files(tmp_path):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(queue_doc("child", parent="root")))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(queue_doc("root")))
    c = load_files([str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")])
    assert sorted(q.name for q in c.queues) == ["child", "root"]


# --------------------------------------------------------------------------- PriorityClass


def test_priority_class():
    c = load("""
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: train}
        value: 50
        ---
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: dflt}
        value: 10
        globalDefault: true
    """)
    a, b = c.priority_classes
    assert (a.name, a.value, a.global_default) == ("train", 50, False)
    assert (b.name, b.value, b.global_default) == ("dflt", 10, True)


def test_priority_class_bad_value():
    e = error("""
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: train}
        value: fifty
    """)
    assert (e.obj, e.field) == ("PriorityClass train", "value")
    e = error("""
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: train}
    """)
    assert e.field == "value"


# --------------------------------------------------------------------------- NodeMetric


NODE_METRIC = """
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeMetric
metadata: {name: n1}
spec:
  metricCollectPolicy: {aggregateDurationSeconds: 300, reportIntervalSeconds: 30}
status:
  updateTime: "2024-05-01T12:00:00Z"
  nodeMetric:
    nodeUsage:
      resources: {cpu: 1500m, memory: 2Gi}
    systemUsage:
      resources: {cpu: 100m}
    aggregatedNodeUsages:
    - duration: 5m0s
      usage:
        p50: {resources: {cpu: "1", memory: 1Gi}}
        p99: {resources: {cpu: "3"}}
    - usage: {p90: {resources: {memory: 1Mi}}}
  podsMetric:
  - namespace: team-a
    name: p1
    priority: koord-prod
    podUsage: {resources: {cpu: 250m, memory: 100Mi}}
  - name: p2
    podUsage: {resources: {cpu: 1}}
"""


def test_node_metric_fields():
    (m,) = load(NODE_METRIC).node_metrics
    assert m.name == "n1"
    assert m.update_time == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert m.node_usage == {"cpu": 1500.0, "memory": 2 * GI}
    assert m.system_usage == {"cpu": 100.0}
    assert m.report_interval_seconds == 30.0
    a0, a1 = m.aggregated_usages
    assert a0.duration == 300.0
    assert a0.usage == {"p50": {"cpu": 1000.0, "memory": GI}, "p99": {"cpu": 3000.0}}
    assert a1.duration is None and a1.usage == {"p90": {"memory": 1024.0**2}}
    p1, p2 = m.pods_usage
    assert (p1.namespace, p1.name, p1.priority_class) == ("team-a", "p1", "koord-prod")
    assert p1.usage == {"cpu": 250.0, "memory": 100 * 1024.0**2}
    assert (p2.namespace, p2.name, p2.priority_class, p2.usage) == (
        "default",
        "p2",
        None,
        {"cpu": 1000.0},
    )


def test_node_metric_defaults():
    (m,) = load_objects(
        [
            {
                "apiVersion": "slo.koordinator.sh/v1alpha1",
                "kind": "NodeMetric",
                "metadata": {"name": "n"},
            }
        ]
    ).node_metrics
    assert m.report_interval_seconds == 60.0
    assert m.update_time is None and m.node_usage == {} and m.pods_usage == []


def test_node_metric_bad_usage():
    doc = {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "n"},
        "status": {"podsMetric": [{"name": "p", "podUsage": {"resources": {"cpu": "?"}}}]},
    }
    with pytest.raises(InputError) as info:
        load_objects([doc])
    assert info.value.field == "status.podsMetric[0].podUsage.resources.cpu"
    assert info.value.obj == "NodeMetric n"


def test_node_metric_bad_update_time():
    doc = {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "n"},
        "status": {"updateTime": "noon"},
    }
    with pytest.raises(InputError) as info:
        load_objects([doc])
    assert info.value.field == "status.updateTime"


# --------------------------------------------------------------------------- SchedulerConfiguration


CONFIG = """
apiVersion: kai.scheduler/v1
kind: SchedulerConfiguration
actions: "allocate, reclaim,, preempt "
tiers:
- plugins:
  - name: predicates
  - name: proportion
    arguments: {kValue: "1.0"}
  - name: loadaware
    arguments:
      resourceWeights: {cpu: 1, memory: 2}
      usageThresholds: {cpu: 65}
- plugins:
  - name: minruntime
queueDepthPerAction: {reclaim: 100, preempt: "5"}
maxNumberConsolidationPreemptees: 4
reclaimMinRuntime: 10m
preemptMinRuntime: 30s
"""


def test_scheduler_configuration():
    cfg = load(CONFIG).config
    assert cfg.actions == ["allocate", "reclaim", "preempt"]
    assert cfg.tiers == [
        [
            PluginOption("predicates", {}),
            PluginOption("proportion", {"kValue": "1.0"}),
            PluginOption(
                "loadaware",
                {"resourceWeights": {"cpu": 1, "memory": 2}, "usageThresholds": {"cpu": 65}},
            ),
        ],
        [PluginOption("minruntime", {})],
    ]
    assert cfg.queue_depth_per_action == {"reclaim": 100, "preempt": 5}
    assert cfg.max_consolidation_preemptees == 4
    assert cfg.reclaim_min_runtime == 600.0 and cfg.preempt_min_runtime == 30.0
    assert cfg.source == Source("snap.yaml", 0)


def test_scheduler_configuration_defaults_and_list_actions():
    c = load_objects(
        [
            {
                "apiVersion": "kai.scheduler/v1",
                "kind": "SchedulerConfiguration",
                "actions": [" allocate", "", "reclaim"],
            }
        ]
    )
    assert c.config.actions == ["allocate", "reclaim"]
    assert c.config.tiers is None and c.config.queue_depth_per_action == {}
    assert c.config.reclaim_min_runtime is None and c.config.preempt_min_runtime is None
    assert load_objects([]).config is None


def test_second_scheduler_configuration_is_an_error():
    doc = {"apiVersion": "kai.scheduler/v1", "kind": "SchedulerConfiguration"}
    with pytest.raises(InputError) as info:
        load_objects([doc, pod_doc(), doc], file="c.yaml")
    e = info.value
    assert e.document == 2 and "more than one SchedulerConfiguration" in e.message
    assert "c.yaml, document 0" in e.message


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"actions": 5}, "actions"),
        ({"actions": ["allocate", 3]}, "actions[1]"),
        ({"tiers": {"plugins": []}}, "tiers"),
        ({"tiers": [{"plugins": [{"arguments": {}}]}]}, "tiers[0].plugins[0].name"),
        (
            {"tiers": [{"plugins": [{"name": "x", "arguments": ["a"]}]}]},
            "tiers[0].plugins[0].arguments",
        ),
        ({"queueDepthPerAction": {"reclaim": "many"}}, "queueDepthPerAction.reclaim"),
        ({"queueDepthPerAction": {"reclaim": -1}}, "queueDepthPerAction.reclaim"),
        ({"reclaimMinRuntime": "-1s"}, "reclaimMinRuntime"),
        ({"maxNumberConsolidationPreemptees": -2}, "maxNumberConsolidationPreemptees"),
        ({"maxNumberConsolidationPreemptees": "all"}, "maxNumberConsolidationPreemptees"),
        ({"preemptMinRuntime": "1 hour"}, "preemptMinRuntime"),
    ],
)
def test_scheduler_configuration_errors(body, field):
    doc = {"apiVersion": "kai.scheduler/v1", "kind": "SchedulerConfiguration", **body}
    with pytest.raises(ConfigError) as info:
        load_objects([doc])
    assert info.value.field == field
    assert info.value.obj == "SchedulerConfiguration"


def test_load_config_file_object_form(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(y(CONFIG))
    cfg = load_config_file(str(path))
    assert cfg.actions == ["allocate", "reclaim", "preempt"]
    assert cfg.source == Source(str(path), 0)


def test_load_config_file_bare_form(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(
        y("""
        actions: allocate,consolidation
        tiers:
        - plugins:
          - name: proportion
        usageDBConfig: {clientType: prometheus}
        preemptMinRuntime: 1m
    """)
    )
    cfg = load_config_file(str(path))
    assert cfg.actions == ["allocate", "consolidation"]
    assert cfg.tiers == [[PluginOption("proportion")]]
    assert cfg.preempt_min_runtime == 60.0


def test_load_config_file_empty_and_errors(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    assert load_config_file(str(empty)).actions is None
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump(pod_doc()))
    with pytest.raises(InputError, match="SchedulerConfiguration"):
        load_config_file(str(wrong))
    bad = tmp_path / "bad.yaml"
    bad.write_text("actions: 5\n")
    with pytest.raises(ConfigError) as info:
        load_config_file(str(bad))
    assert info.value.field == "actions" and info.value.file == str(bad)
    with pytest.raises(InputError, match="cannot read"):
        load_config_file(str(tmp_path / "missing.yaml"))


# --------------------------------------------------------------------------- documents and files


def test_multi_document_yaml_indexes_and_empty_documents():
    c = load("""
        apiVersion: v1
        kind: Node
        metadata: {name: n1}
        ---
        ---
        # only a comment
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: p1}
    """)
    assert c.nodes[0].source == Source("snap.yaml", 0)
    assert c.pods[0].source == Source("snap.yaml", 3)


def test_kubectl_list():
    text = """
        apiVersion: v1
        kind: Node
        metadata: {name: n0}
        ---
        apiVersion: v1
        kind: List
        metadata: {resourceVersion: ""}
        items:
        - apiVersion: v1
          kind: Pod
          metadata: {name: p1, namespace: ns}
        - apiVersion: apps/v1
          kind: Deployment
          metadata: {name: web, namespace: ns, uid: d1}
        - apiVersion: v1
          kind: Node
          metadata: {name: n1}
    """
    c = load(text)
    assert [p.key for p in c.pods] == ["ns/p1"]
    assert c.pods[0].source == Source("snap.yaml", 1)
    assert [n.name for n in c.nodes] == ["n0", "n1"]
    (d,) = c.others
    assert (d.api_version, d.kind, d.name, d.namespace, d.uid) == (
        "apps/v1",
        "Deployment",
        "web",
        "ns",
        "d1",
    )


def test_list_item_error_names_item():
    e = error("""
        apiVersion: v1
        kind: List
        items:
        - apiVersion: v1
          kind: Pod
          metadata: {name: ok}
        - apiVersion: v1
          kind: Pod
          metadata: {name: bad, namespace: ns}
          spec: {containers: [{resources: {requests: {cpu: "1x"}}}]}
    """)
    assert (e.document, e.obj) == (0, "Pod ns/bad")
    assert e.field == "spec.containers[0].resources.requests.cpu"
    e = error("""
        apiVersion: v1
        kind: List
        items:
        - apiVersion: v1
          kind: Pod
          metadata: {namespace: ns}
    """)
    assert e.field == "metadata.name" and "items[0]" in e.obj
    e = error("""
        apiVersion: v1
        kind: List
        items:
        - kind: Pod
          metadata: {name: x}
    """)
    assert e.field == "apiVersion" and e.obj == "Pod x"
    e = error("""
        apiVersion: v1
        kind: List
        items: [1]
    """)
    assert e.obj == "items[0]"


def test_typed_list_items_inherit_kind():
    doc = {
        "apiVersion": "v1",
        "kind": "PodList",
        "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}],
    }
    c = load_objects([doc])
    assert [p.name for p in c.pods] == ["a", "b"]


def test_json_input(tmp_path):
    doc = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            pod_doc("p1", "ns"),
            {
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": {"name": "q"},
                "spec": {"resources": {"gpu": {"quota": 1}}},
            },
        ],
    }
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc, indent=2))
    c = load_files([str(path)])
    assert [p.key for p in c.pods] == ["ns/p1"]
    assert c.queues[0].resources == {"gpu": QueueResource(1.0, 0.0, 0.0)}
    assert c.pods[0].source == Source(str(path), 0)


def test_file_bytes_read_as_utf8_with_or_without_a_byte_order_mark(tmp_path):
    """A JSON file is parsed from its bytes, a YAML one from its text: a UTF-8 byte
    order mark is dropped from either, a file that is not UTF-8 is reported, and a
    JSON-looking file that is not JSON goes to the YAML reader and its messages."""
    doc = {"apiVersion": "v1", "kind": "List", "items": [pod_doc("pé", "ns")]}
    text = json.dumps(doc, ensure_ascii=False)
    loaded = []
    for name, data in (
        ("plain.json", text.encode()),
        ("marked.json", codecs.BOM_UTF8 + b" \n\t" + text.encode()),
        ("marked.yaml", codecs.BOM_UTF8 + yaml.safe_dump(doc, allow_unicode=True).encode()),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        loaded.append([(p.key, p.requests) for p in load_files([str(path)]).pods])
    assert loaded[0] == loaded[1] == loaded[2] == [("ns/pé", loaded[0][0][1])]
    latin = tmp_path / "latin.json"
    latin.write_bytes(text.encode("latin-1"))
    with pytest.raises(InputError) as err:
        load_files([str(latin)])
    assert err.value.file == str(latin) and "cannot read file" in err.value.message
    assert "utf-8" in err.value.message
    flow = tmp_path / "flow.json"
    flow.write_bytes(b"{apiVersion: v1, kind: List, items: []}")  # YAML, not JSON
    assert load_files([str(flow)]).pods == []
    cut = tmp_path / "cut.json"
    cut.write_bytes(text.encode()[:-5])
    with pytest.raises(InputError) as err:
        load_files([str(cut)])
    assert err.value.file == str(cut) and "YAML does not parse" in err.value.message


def test_json_error_is_reported_with_position():
    e = error('{"apiVersion": "v1", "kind": "Pod",\n  "metadata": {"name": "x"\n')
    assert e.document == 0 and "line" in e.message


def test_yaml_syntax_error_has_line_and_column():
    e = error(
        """
        apiVersion: v1
        kind: Node
        metadata: {name: n1}
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: [p1
        spec: {}
    """,
        file="broken.yaml",
    )
    assert e.file == "broken.yaml" and e.document == 1
    assert "line" in e.message and "column" in e.message
    assert str(e).startswith("broken.yaml, document 1: line ")


def test_yaml_bad_timestamp_value_is_an_input_error():
    e = error("""
        apiVersion: v1
        kind: Pod
        metadata: {name: p, creationTimestamp: 2024-13-01}
    """)
    assert e.document == 0


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_document_not_a_mapping(text):
    e = error(text)
    assert e.document == 0 and "not a Kubernetes object" in e.message


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"kind": "Pod", "metadata": {"name": "x"}}, "apiVersion"),
        ({"apiVersion": "v1", "metadata": {"name": "x"}}, "kind"),
        ({"apiVersion": "", "kind": "Pod"}, "apiVersion"),
        ({"apiVersion": "v1", "kind": 3}, "kind"),
    ],
)
def test_missing_api_version_or_kind(doc, field):
    with pytest.raises(InputError) as info:
        load_objects([pod_doc(), doc])
    assert info.value.document == 1 and info.value.field == field


@pytest.mark.parametrize(
    "doc",
    [
        {"apiVersion": "v1", "kind": "Pod"},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "x"}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": ""}},
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {}},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": 1},
    ],
)
def test_missing_name(doc):
    with pytest.raises(InputError) as info:
        load_objects([doc])
    assert info.value.field in ("metadata", "metadata.name")
    assert info.value.obj.startswith(doc["kind"])


def test_unknown_kinds():
    docs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}},  # no metadata: ignored
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "j",
                "namespace": "ns",
                "uid": "u",
                "labels": {"a": "b"},
                "ownerReferences": [{"kind": "JobSet", "name": "js", "controller": True}],
            },
        },
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "ns"},
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}},
        {"apiVersion": "x/v1", "kind": "Thing", "metadata": {"labels": {}}},  # no name: ignored
        {"apiVersion": "v2", "kind": "Node", "metadata": {"name": "other"}},  # not core/v1
    ]
    c = load_objects(docs)
    assert [(o.kind, o.name, o.namespace) for o in c.others] == [
        ("Job", "j", "ns"),
        ("JobSet", "js", "ns"),
        ("Namespace", "ns", None),
        ("Node", "other", None),
    ]
    job = c.others[0]
    assert job.uid == "u" and job.labels == {"a": "b"}
    assert job.owner_references == (OwnerReference("JobSet", "js", "", True),)
    assert c.nodes == []


def test_duplicates_name_both_sources(tmp_path):
    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump_all([pod_doc("x", "ns")]))
    b.write_text(yaml.safe_dump_all([pod_doc("y", "ns"), pod_doc("x", "ns")]))
    with pytest.raises(InputError) as info:
        load_files([str(a), str(b)])
    e = info.value
    assert (e.file, e.document, e.obj) == (str(b), 1, "Pod ns/x")
    assert "duplicate" in e.message and f"{a}, document 0" in e.message


def test_duplicate_rules():
    # same name in different namespaces or of different kinds is fine
    docs = [
        pod_doc("x", "a"),
        pod_doc("x", "b"),
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "x"}},
        {
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeMetric",
            "metadata": {"name": "x"},
        },
    ]
    assert len(load_objects(docs).pods) == 2
    # namespace defaulting makes these two the same pod
    with pytest.raises(InputError, match="duplicate"):
        load_objects(
            [
                pod_doc("x", "default"),
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}},
            ]
        )
    # queues through the alias group are the same kind
    with pytest.raises(InputError, match="duplicate Queue q"):
        load_objects(
            [queue_doc("q"), dict(queue_doc("q"), apiVersion="scheduling.kai.nvidia.com/v2")]
        )
    # generic objects too
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "n"}}
    with pytest.raises(InputError, match="duplicate Job n/j"):
        load_objects([job, job])


def test_unreadable_file(tmp_path):
    with pytest.raises(InputError) as info:
        load_files([str(tmp_path / "nope.yaml")])
    assert info.value.file == str(tmp_path / "nope.yaml") and "cannot read" in info.value.message
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage\x80")
    with pytest.raises(InputError, match="cannot read"):
        load_files([str(binary)])


def test_directory_and_single_path(tmp_path):
    (tmp_path / "1.yaml").write_text(yaml.safe_dump(pod_doc("a")))
    (tmp_path / "2.json").write_text(json.dumps(pod_doc("b")))
    (tmp_path / "README.md").write_text("not yaml: [")
    assert [p.name for p in load_files([str(tmp_path)]).pods] == ["a", "b"]
    assert [p.name for p in load_files(str(tmp_path / "1.yaml")).pods] == ["a"]


def test_load_objects_document_index_and_bad_items():
    with pytest.raises(InputError) as info:
        load_objects([pod_doc("a"), None, "oops"], file="py")
    assert info.value.document == 2 and info.value.file == "py"


def test_yaml_anchors_and_merge_keys():
    c = load("""
        apiVersion: v1
        kind: List
        items:
        - &pod
          apiVersion: v1
          kind: Pod
          metadata: {name: a}
          spec:
            containers:
            - resources: &res {requests: {cpu: "1"}}
        - <<: *pod
          metadata: {name: b}
    """)
    assert [(p.name, p.requests) for p in c.pods] == [
        ("a", {"cpu": 1000.0}),
        ("b", {"cpu": 1000.0}),
    ]


def test_recursive_alias_is_an_input_error():
    e = error("a: &x [1, *x]\n")
    assert e.document == 0


def test_non_string_scalars_are_coerced_in_maps():
    doc = pod_doc(nodeSelector={"gpu": True, "count": 4, "ratio": 0.5, "empty": None})
    assert load_objects([doc]).pods[0].node_selector == {
        "gpu": "true",
        "count": "4",
        "ratio": "0.5",
        "empty": "",
    }


def test_error_render_format():
    e = error("""
        apiVersion: scheduling.run.ai/v2
        kind: Queue
        metadata: {name: q}
        spec: {resources: {gpu: {quota: -3}}}
    """)
    assert str(e).startswith("snap.yaml, document 0, Queue q, field spec.resources.gpu.quota: ")


def test_many_pods_load_quickly():
    import time

    docs = [
        pod_doc(
            f"p{i}",
            "ns",
            containers=[
                {
                    "name": "c",
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "1Gi"},
                        "limits": {"nvidia.com/gpu": 1},
                    },
                }
            ],
        )
        for i in range(20000)
    ]
    start = time.perf_counter()
    c = load_objects(docs)
    assert len(c.pods) == 20000
    assert time.perf_counter() - start < 10


def test_snapshots_and_results_survive_pickle_and_deepcopy():
    # Read-only maps are mapping proxies, which the standard library cannot copy by
    # itself; a snapshot sent to a worker process must still schedule the same.
    example = Path(__file__).resolve().parents[1] / "examples" / "cluster.yaml"
    snap = Snapshot.from_files([str(example)])
    now = "2026-11-22T12:00:00Z"
    expected = run_session(snap, now=now).to_json()
    for clone in (pickle.loads(pickle.dumps(snap.objects)), copy.deepcopy(snap.objects)):
        assert run_session(Snapshot(clone), now=now).to_json() == expected
        assert clone.pods[0].scheduling_gates == ()
    assert pickle.loads(pickle.dumps(EMPTY_MAP)) is EMPTY_MAP
    result = run_session(snap, now=now)
    assert pickle.loads(pickle.dumps(result)).to_json() == expected
