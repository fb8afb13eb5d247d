"""Placement that depends on what the API server holds: NodeMetric usage, the GPU group
label written back on shared-GPU pods, and a gang whose bind is refused."""

from __future__ import annotations

from datetime import datetime, timezone

from kubernetes import client

from tests.e2e.cluster import Cluster, DeletionRecorder, wait_for

LOADAWARE_CONFIG = """\
apiVersion: kai.scheduler/v1
kind: SchedulerConfiguration
actions: "allocate"
tiers:
- plugins:
  - name: predicates
  - name: proportion
  - name: priority
  - name: nodeplacement
    arguments: {gpu: binpack, cpu: binpack}
  - name: loadaware
    arguments:
      usageThresholds: {cpu: 65, memory: 95}
"""


def test_load_aware_placement_from_node_metrics(cluster: Cluster, tmp_path) -> None:
    busy = cluster.node("busy", gpus=0, cpu="16", memory="64Gi")
    idle = cluster.node("idle", gpus=0, cpu="16", memory="64Gi")
    cluster.wait_nodes_ready()
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    # Both nodes are empty as far as requests go; the busy one is at 90% CPU in reality.
    cluster.node_metric(busy, cpu="14400m", memory="8Gi", update_time=now)
    cluster.node_metric(idle, cpu="1", memory="8Gi", update_time=now)
    cluster.queue("team")
    config = tmp_path / "loadaware.yaml"
    config.write_text(LOADAWARE_CONFIG)
    for i in range(3):
        cluster.pod(f"web-{i}", queue="team", cpu="2", memory="2Gi")
    cluster.kai(f"--scheduler-conf={config}")
    wait_for(lambda: cluster.bound("web-0", "web-1", "web-2"), 60, "pods bound")
    assert set(cluster.placement().values()) == {idle}


def test_second_fraction_joins_the_first_ones_gpu(cluster: Cluster) -> None:
    node = cluster.node("n0", gpus=2)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=2)
    cluster.pod("first", queue="team", annotations={"gpu-fraction": "0.5"})
    kai = cluster.kai()
    wait_for(lambda: cluster.bound("first"), 60, "the first fraction bound")
    first = cluster.pods()["first"]
    group = first.metadata.labels.get("runai-gpu-group")
    assert group, "the device group was not written back"
    assert first.spec.node_name == node
    # A later pod, in a later cycle, reads the group back from the label and shares the
    # device instead of taking the second GPU.
    cluster.pod("second", queue="team", annotations={"gpu-fraction": "0.5"})
    wait_for(lambda: cluster.bound("second"), 60, "the second fraction bound")
    second = cluster.pods()["second"]
    assert second.metadata.labels.get("runai-gpu-group") == group
    assert kai.proc.poll() is None


def _deny_bindings(cluster: Cluster, suffix: str) -> str:
    """A ValidatingAdmissionPolicy that refuses to bind the pods whose name ends with
    ``suffix``: a real admission denial.  Returns once the policy is in force."""
    api = client.AdmissionregistrationV1Api(cluster.e2e.api)
    name = f"{cluster.pool}-deny-bind"
    api.create_validating_admission_policy(
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": f"!object.metadata.name.endsWith('{suffix}')",
                        "message": "this binding is refused by policy",
                    }
                ],
            },
        }
    )
    api.create_validating_admission_policy_binding(
        {
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": cluster.ns}
                    }
                },
            },
        }
    )
    # Policies load asynchronously: probe with pods no scheduler owns until one is refused.
    attempts = iter(range(1000))

    def refused() -> bool:
        probe = f"probe{next(attempts)}{suffix}"
        cluster.pod(probe, scheduler="nobody")
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=probe),
            target=client.V1ObjectReference(kind="Node", name="nowhere"),
        )
        try:
            # The answer is a Status the client cannot read as a Binding: keep it raw.
            cluster.core.create_namespaced_pod_binding(
                probe, cluster.ns, body, _preload_content=False
            )
        except client.ApiException as err:
            return err.status in (400, 403, 422)
        return False

    wait_for(refused, 30, "the binding policy in force")
    return name


def test_gang_rolled_back_after_a_failed_bind(cluster: Cluster) -> None:
    for i in range(3):
        cluster.node(f"n{i}", gpus=1)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=3)
    api = client.AdmissionregistrationV1Api(cluster.e2e.api)
    policy = _deny_bindings(cluster, "-2")
    recorder = DeletionRecorder(cluster)
    try:
        owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "trainer",
            "uid": "00000000-0000-0000-0000-00000000cafe",
            "controller": True,
        }
        cluster.pod_group("gang", "team", min_member=3)
        for i in range(3):
            cluster.pod(f"gang-{i}", group="gang", gpus=1, owner=owner)
        cluster.kai()
        # gang-2's bind is refused: the members bound in that cycle are deleted, so that
        # their controller recreates them pending; nothing of the gang stays bound.
        event = wait_for(
            lambda: [e for e in cluster.events("gang") if e.reason == "BindFailed"],
            60,
            "a BindFailed event on the PodGroup",
        )
        assert "rolled back" in event[0].message
        wait_for(
            lambda: recorder.deleted.get("gang-0") and recorder.deleted.get("gang-1"),
            30,
            "the bound members deleted",
        )
        assert not cluster.placement().get("gang-2")
        assert "gang-2" in cluster.pods()  # the refused pod itself is left pending
    finally:
        recorder.stop()
        api.delete_validating_admission_policy_binding(policy)
        api.delete_validating_admission_policy(policy)
