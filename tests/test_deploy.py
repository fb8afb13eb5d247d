"""The manifests of deploy/: what a user installs must match what ``kai run`` does.

The CRDs are checked against the kinds kai watches (``KINDS``) and the fields its loader
reads; the RBAC against the API calls in ``kai.k8s``; the Deployments against the
``kai run`` command and the endpoints the scheduler serves.  None of this needs a
cluster (tests/e2e installs the same files into a real API server).
"""

from __future__ import annotations

import inspect
import json
import re
import urllib.error
import urllib.request
from datetime import date
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from kai import cli
from kai.k8s.client import KINDS, OWNER_KINDS, POD_GROUP
from kai.k8s.server import HealthServer, parse_listen_address
from kai.snapshot import loader

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
NAMESPACE = "kai-scheduler"
ACCOUNT = "kai-scheduler"

# The kinds kai reads from CRDs: everything in KINDS outside the built-in groups.
BUILT_IN_GROUPS = {"", "scheduling.k8s.io"}
CRD_KINDS = [k for k in KINDS.values() if k.group not in BUILT_IN_GROUPS]
# Kinds whose CRD belongs to another project: shipped for clusters that lack it only.
OPTIONAL_KINDS = {"NodeMetric"}


def load(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_docs() -> list[tuple[Path, dict]]:
    return [(p, d) for p in sorted(DEPLOY.rglob("*.yaml")) for d in load(p)]


def docs_of(kind: str) -> list[dict]:
    return [d for _, d in all_docs() if d["kind"] == kind]


def test_every_manifest_parses_and_names_its_kind():
    docs = all_docs()
    assert len({p for p, _ in docs}) >= 8
    for path, doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), path
        if doc["kind"] != "Kustomization":
            assert doc.get("metadata", {}).get("name"), path


# --------------------------------------------------------------------------- CRDs
def crd_path(kind) -> Path:
    folder = DEPLOY / "crds" / ("optional" if kind.name in OPTIONAL_KINDS else "")
    return folder / f"{kind.plural}.{kind.group}.yaml"


def crd(kind) -> dict:
    (doc,) = load(crd_path(kind))
    return doc


def schema_of(kind) -> dict:
    (version,) = [v for v in crd(kind)["spec"]["versions"] if v["name"] == kind.version]
    return version["schema"]["openAPIV3Schema"]


def at(schema: dict, path: str) -> dict:
    """The schema node of ``spec.resources.gpu`` or ``status.podsMetric[]``."""
    node = schema
    for part in path.split("."):
        name, items = part.removesuffix("[]"), part.endswith("[]")
        props = node.get("properties") or {}
        assert name in props, f"{path}: {name!r} is not declared"
        node = props[name]
        if items:
            assert node.get("type") == "array", f"{path}: {name!r} is not a list"
            node = node["items"]
    return node


@pytest.mark.parametrize("kind", CRD_KINDS, ids=lambda k: k.name)
def test_crd_serves_the_group_version_and_scope_kai_watches(kind):
    doc = crd(kind)
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
    spec = doc["spec"]
    assert doc["metadata"]["name"] == f"{kind.plural}.{kind.group}"
    assert spec["group"] == kind.group
    assert spec["names"]["kind"] == kind.name
    assert spec["names"]["plural"] == kind.plural
    assert spec["scope"] == ("Namespaced" if kind.namespaced else "Cluster")
    versions = {v["name"]: v for v in spec["versions"]}
    assert versions[kind.version]["served"] and versions[kind.version]["storage"]
    assert sum(bool(v["storage"]) for v in versions.values()) == 1
    # kai writes PodGroup status through the subresource; the others mirror upstream.
    assert versions[kind.version]["subresources"]["status"] == {}


def test_every_crd_kind_is_shipped_and_nothing_else():
    shipped = {p.name for p in (DEPLOY / "crds").rglob("*.yaml")}
    assert shipped == {crd_path(k).name for k in CRD_KINDS}


def test_podgroup_short_name():
    assert crd(POD_GROUP)["spec"]["names"]["shortNames"] == ["pg"]


def walk(node: dict, path: str = ""):
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], path + "[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], path + "{}")


@pytest.mark.parametrize("kind", CRD_KINDS, ids=lambda k: k.name)
def test_crd_schema_is_structural_and_keeps_unknown_fields(kind):
    schema = schema_of(kind)
    for path, node in walk(schema):
        assert (
            node.get("type")
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        ), f"{kind.name} {path or '<root>'}: no type"
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
    assert schema["properties"]["metadata"] == {"type": "object"}
    # Fields a newer release adds are stored, not pruned.
    for part in ("spec", "status"):
        assert schema["properties"][part]["x-kubernetes-preserve-unknown-fields"] is True


def loader_reads(func, roots: dict[str, str]) -> set[str]:
    """The field paths a loader function reads as ``var.get("field")``, for the variables
    in ``roots`` (variable name -> path of the object it holds)."""
    source = inspect.getsource(func)
    return {
        f"{roots[var]}.{field}"
        for var, field in re.findall(r"\b(\w+)\.get\(\s*\"(\w+)\"", source)
        if var in roots
    }


LOADER_FIELDS = {
    "PodGroup": loader_reads(loader._parse_pod_group, {"spec": "spec"}),
    "Queue": loader_reads(loader._parse_queue, {"spec": "spec"})
    | {
        f"spec.resources.{res}.{amount}"
        for res in loader._QUEUE_RESOURCES
        for amount in ("quota", "limit", "overQuotaWeight")
    },
    "NodeMetric": loader_reads(
        loader._parse_node_metric,
        {
            "spec": "spec",
            "status": "status",
            "policy": "spec.metricCollectPolicy",
            "node_metric": "status.nodeMetric",
            "pm": "status.podsMetric[]",
            "agg": "status.nodeMetric.aggregatedNodeUsages[]",
        },
    ),
}


@pytest.mark.parametrize("kind", CRD_KINDS, ids=lambda k: k.name)
def test_every_field_the_loader_reads_is_typed(kind):
    fields = LOADER_FIELDS[kind.name]
    assert len(fields) >= 4, fields  # the regular expression still finds the reads
    schema = schema_of(kind)
    for field in sorted(fields):
        assert at(schema, field).get("type"), field


# Fields a KAI-Scheduler user sets, and what kai writes into PodGroup status.
KAI_PODGROUP_SPEC = {
    "minMember": "integer",
    "queue": "string",
    "priorityClassName": "string",
    "preemptibility": "string",
    "markUnschedulable": "boolean",
    "schedulingBackoff": "integer",
    "subGroups": "array",
    "topologyConstraint": "object",
}
KAI_QUEUE_SPEC = {
    "parentQueue": "string",
    "priority": "integer",
    "displayName": "string",
    "resources": "object",
    "preemptMinRuntime": "string",
    "reclaimMinRuntime": "string",
}
# binder._patch_status's condition and api.preemptibility.published_status.
SCHEDULING_CONDITION = (
    "type",
    "nodePool",
    "status",
    "reason",
    "message",
    "transitionID",
    "lastTransitionTime",
)


def test_podgroup_and_queue_declare_kai_scheduler_fields():
    pg, q = schema_of(POD_GROUP), schema_of(KINDS["Queue"])
    for field, type_ in KAI_PODGROUP_SPEC.items():
        assert at(pg, f"spec.{field}")["type"] == type_, field
    for field, type_ in KAI_QUEUE_SPEC.items():
        assert at(q, f"spec.{field}")["type"] == type_, field
    for field in ("phase", "preemptibility", "corePods", "resourcesStatus"):
        assert at(pg, f"status.{field}").get("type"), field
    for field in SCHEDULING_CONDITION:
        assert at(pg, f"status.schedulingConditions[].{field}")["type"] == "string", field
    from kai.api.preemptibility import NON_PREEMPTIBLE, PREEMPTIBLE, SEMI_PREEMPTIBLE

    assert set(at(pg, "spec.preemptibility")["enum"]) == {
        PREEMPTIBLE,
        NON_PREEMPTIBLE,
        SEMI_PREEMPTIBLE,
    }


def validate(value: Any, schema: dict, path: str = "") -> list[str]:
    """What the API server would reject or prune (the subset of OpenAPI the CRDs use)."""
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, (int, str)) and not isinstance(value, bool)
        return [] if ok else [f"{path}: not an int or string"]
    type_ = schema.get("type")
    checks = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        # YAML turns unquoted timestamps into dates; JSON on the wire has strings.
        "string": lambda v: isinstance(v, (str, date)),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
    }
    if type_ and not checks[type_](value):
        return [f"{path}: expected {type_}, got {type(value).__name__}"]
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: {value!r} below {schema['minimum']}")
    if isinstance(value, dict) and path != "metadata":
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            sub = f"{path}.{key}" if path else key
            if key in props:
                errors += validate(child, props[key], sub)
            elif isinstance(extra, dict):
                errors += validate(child, extra, sub)
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                errors.append(f"{sub}: pruned")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], f"{path}[{i}]")
    return errors


KAI_USER_OBJECTS = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: train, namespace: team-a}
spec:
  minMember: 4
  queue: team-a
  priorityClassName: train
  preemptibility: non-preemptible
  markUnschedulable: true
  schedulingBackoff: -1
  minSubGroup: 2
  subGroups:
  - {name: workers, minMember: 2, topologyConstraint: {topology: dc, requiredTopologyLevel: rack}}
  - {name: ps, parent: workers, minMember: 1}
  topologyConstraint: {topology: dc, preferredTopologyLevel: zone}
status:
  phase: Running
  running: 4
  preemptibility: non-preemptible
  resourcesStatus:
    allocated: {nvidia.com/gpu: 4, cpu: 4000m, memory: 16Gi}
  schedulingConditions:
  - type: UnschedulableOnNodePool
    nodePool: default
    status: "True"
    reason: Unschedulable
    message: waiting
    transitionID: "3"
    lastTransitionTime: "2025-01-01T00:00:00Z"
    reasons: [{reason: OverLimit, message: m, details: {queueDetails: {name: team-a}}}]
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a}
spec:
  parentQueue: root
  priority: 100
  displayName: Team A
  preemptMinRuntime: 10m
  reclaimMinRuntime: 5m
  resources:
    gpu: {quota: 2.5, limit: -1, overQuotaWeight: 1}
    cpu: {quota: 8000, limit: 16000, overQuotaWeight: 1}
    memory: {quota: 32000, limit: -1, overQuotaWeight: 0}
status:
  childQueues: []
  allocated: {nvidia.com/gpu: "2"}
"""


def objects_of_crd_kinds() -> list[tuple[str, dict]]:
    out = [("KAI user objects", d) for d in yaml.safe_load_all(KAI_USER_OBJECTS)]
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in {k.name for k in CRD_KINDS}:
                out.append((str(path.relative_to(ROOT)), doc))
    return out


@pytest.mark.parametrize(
    ("source", "obj"),
    objects_of_crd_kinds(),
    ids=lambda x: x if isinstance(x, str) else f"{x['kind']}/{x['metadata']['name']}",
)
def test_objects_validate_and_lose_no_field(source, obj):
    kind = KINDS[obj["kind"]]
    assert obj["apiVersion"] == kind.api_version, source
    assert validate(obj, schema_of(kind)) == [], source


def test_validator_catches_what_the_api_server_rejects():
    pg = schema_of(POD_GROUP)
    assert validate({"spec": {"minMember": "2"}}, pg)
    assert validate({"spec": {"preemptibility": "sometimes"}}, pg)
    assert validate({"spec": {"minMember": -1}}, pg)
    assert validate({"spec": {"topologyConstraint": {"topology": 1}}}, pg)
    assert validate({"spec": {"resources": {"gpu": {"quota": "2"}}}}, schema_of(KINDS["Queue"]))


# --------------------------------------------------------------------------- RBAC
def rule_grants(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def rbac(kind: str) -> list[dict]:
    return [d for d in load(DEPLOY / "rbac.yaml") if d["kind"] == kind]


# The permission each request of kai.k8s's client needs.  List and watch requests are
# covered by the kinds they read (below).
WRITE_CALLS = {
    "bind": ("", "pods/binding", "create"),
    "evict": ("", "pods/eviction", "create"),
    "delete_pod": ("", "pods", "delete"),
    "patch_pod": ("", "pods", "patch"),
    "patch_pod_status": ("", "pods/status", "patch"),
    "patch_pod_group": (POD_GROUP.group, POD_GROUP.plural, "patch"),
    "patch_pod_group_status": (POD_GROUP.group, f"{POD_GROUP.plural}/status", "patch"),
    "create_event": ("", "events", "create"),
}
LEASE_CALLS = {
    "get_lease": ("coordination.k8s.io", "leases", "get"),
    "create_lease": ("coordination.k8s.io", "leases", "create"),
    "update_lease": ("coordination.k8s.io", "leases", "update"),
}
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def _grant(method: str, url: str) -> tuple[str, str, str]:
    """The (group, resource, verb) an API server checks for a request."""
    path, _, query = url.partition("?")
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[:1] == ["namespaces"]:
        rest = rest[2:]
    resource = "/".join([rest[0], *rest[2:]])  # collection[/name[/subresource]]
    if method == "GET":
        verb = "watch" if "watch=true" in query else ("get" if len(rest) > 1 else "list")
    else:
        verb = _VERBS[method]
    return group, resource, verb


def requests_made() -> dict[str, set[tuple[str, str, str]]]:
    """Every public call of the client, run against a recording server: the permissions
    its requests need, per call."""
    import inspect

    from kai.k8s.client import KubeClient
    from tests.recording_server import recording_server

    pod = {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "ns"}
    lease = {"metadata": {"name": "l", "namespace": "ns"}, "spec": {}}
    args = {
        "bind": ("ns", "p", "n"),
        "evict": ("ns", "p"),
        "delete_pod": ("ns", "p"),
        "patch_pod": ("ns", "p", {}),
        "patch_pod_status": ("ns", "p", {}),
        "patch_pod_group": ("ns", "g", {}),
        "patch_pod_group_status": ("ns", "g", {}),
        "create_event": (pod,),
        "get_lease": ("ns", "l"),
        "create_lease": ("ns", lease),
        "update_lease": ("ns", lease),
    }
    made: dict[str, set[tuple[str, str, str]]] = {}
    with recording_server() as server:
        server.answer = (200, {"items": [], "metadata": {"resourceVersion": "1"}})
        client = KubeClient.for_host(server.url, qps=0)
        # Helpers that send nothing themselves: the pipeline's requests are binds.
        helpers = ("close", "list", "watch", "bind_request", "protobuf_refused", "pipeline")
        public = {
            name
            for name, fn in inspect.getmembers(KubeClient, inspect.isfunction)
            if not name.startswith("_") and name not in helpers
        }
        # A new call must be added here, to WRITE_CALLS or LEASE_CALLS, and to rbac.yaml.
        assert public == set(args), public ^ set(args)
        for name, call_args in args.items():
            before = len(server.requests)
            kwargs = {"reason": "R", "message": "M"} if name == "create_event" else {}
            getattr(client, name)(*call_args, **kwargs)
            made[name] = {_grant(r.method, r.path) for r in server.requests[before:]}
        for kind in [*KINDS.values(), *OWNER_KINDS]:
            before = len(server.requests)
            client.list(kind)
            list(client.watch(kind, "1", timeout_seconds=1))
            made[f"read {kind.name}"] = {_grant(r.method, r.path) for r in server.requests[before:]}
        client.close()
    return made


def test_every_request_needs_the_permission_listed_here():
    made = requests_made()
    for name, grant in {**WRITE_CALLS, **LEASE_CALLS}.items():
        assert made[name] == {grant}, name
    for kind in [*KINDS.values(), *OWNER_KINDS]:
        reads = {(kind.group, kind.plural, "list"), (kind.group, kind.plural, "watch")}
        assert made[f"read {kind.name}"] == reads, kind.name


def cluster_grants_needed() -> set[tuple[str, str, str]]:
    needed = set(WRITE_CALLS.values())
    for kind in [*KINDS.values(), *OWNER_KINDS]:
        needed |= {(kind.group, kind.plural, "list"), (kind.group, kind.plural, "watch")}
        if not kind.metadata_only:
            # get shows no more than list already does; kubectl users expect it.
            needed.add((kind.group, kind.plural, "get"))
    return needed


def test_cluster_role_grants_exactly_what_kai_run_uses():
    (role,) = rbac("ClusterRole")
    granted = rule_grants(role["rules"])
    assert granted == cluster_grants_needed()


def test_lease_role_is_namespaced_and_minimal():
    (role,) = rbac("Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rule_grants(role["rules"]) == set(LEASE_CALLS.values())


def test_no_wildcards_or_resource_names_anywhere():
    for role in rbac("ClusterRole") + rbac("Role"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert not any("*" in v for v in rule[key]), rule
            assert "nonResourceURLs" not in rule


def test_bindings_give_the_roles_to_the_service_account():
    (account,) = rbac("ServiceAccount")
    assert (account["metadata"]["name"], account["metadata"]["namespace"]) == (ACCOUNT, NAMESPACE)
    (namespace,) = rbac("Namespace")
    assert namespace["metadata"]["name"] == NAMESPACE
    for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        (binding,) = rbac(binding_kind)
        (role,) = rbac(role_kind)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": role["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}
        ]
        if binding_kind == "RoleBinding":
            assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]


def test_docs_point_to_the_one_rbac_file():
    text = (ROOT / "docs" / "live-scheduler.md").read_text()
    rbac_section = text.split("## RBAC", 1)[1].split("\n## ", 1)[0]
    assert "deploy/rbac.yaml" in rbac_section
    assert "kind: ClusterRole" not in rbac_section  # no second copy to drift


# --------------------------------------------------------------------------- Deployments
def deployments() -> list[tuple[Path, dict]]:
    return [(p, d) for p, d in all_docs() if d["kind"] == "Deployment"]


DEPLOYMENTS = [d for _, d in deployments()]


def name_of(obj: dict) -> str:
    return obj["metadata"]["name"]


def run_params(deployment: dict) -> dict[str, Any]:
    """``kai run``'s parsed parameters for the container's args (the image's entrypoint
    is ``kai run``); an unknown flag or a bad value fails here."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "command" not in container, "the image's ENTRYPOINT is kai run"
    ctx = cli.run.make_context("run", list(container["args"]))
    return ctx.params


def test_deployments_found():
    names = {name_of(d) for d in DEPLOYMENTS}
    assert names == {"kai-scheduler", "kai-scheduler-pool-a", "kai-scheduler-pool-b"}


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=name_of)
def test_deployment_runs_kai_with_flags_it_accepts(deployment):
    params = run_params(deployment)
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert deployment["metadata"]["namespace"] == NAMESPACE
    assert pod["serviceAccountName"] == ACCOUNT
    assert "schedulerName" not in pod  # the default scheduler places kai itself
    assert spec["replicas"] >= 2 and params["leader_elect"] is True
    assert params["lease_namespace"] == NAMESPACE  # where the Role grants leases
    assert not params["once"] and not params["dry_run"]
    # The selector picks this Deployment's pods only.
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    _, port = parse_listen_address(params["listen_address"])
    assert ports["metrics"] == port


def test_every_shard_has_its_own_pool_and_lease_and_the_same_scheduler_name():
    params = {name_of(d): run_params(d) for d in DEPLOYMENTS}
    default_name = next(p.default for p in cli.run.params if p.name == "scheduler_name")
    assert {p["scheduler_name"] for p in params.values()} == {default_name}
    assert len({p["lease_name"] for p in params.values()}) == len(params)
    pools = {p["partition_label_value"] for p in params.values()}
    assert pools == {"", "pool-a", "pool-b"}
    assert {p["nodepool_label_key"] for p in params.values()} == {"kai.scheduler/node-pool"}
    # No Deployment's selector matches another's pods.
    for a in DEPLOYMENTS:
        for b in DEPLOYMENTS:
            if a is not b:
                sel = a["spec"]["selector"]["matchLabels"].items()
                assert not sel <= b["spec"]["template"]["metadata"]["labels"].items()


def get_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.fixture(scope="module")
def endpoints():
    server = HealthServer(
        "127.0.0.1:0",
        metrics=lambda: b"",
        healthy=lambda: (True, "ok"),
        ready=lambda: (True, "ok"),
    )
    server.start()
    yield server.port
    server.stop()


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=name_of)
def test_probes_hit_endpoints_the_scheduler_serves(deployment, endpoints):
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert get_status(endpoints, "/no-such-path") == 404  # the check below means something
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert get["port"] == "metrics", probe
        assert get_status(endpoints, get["path"]) == 200, probe


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=name_of)
def test_pods_are_locked_down(deployment):
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == dockerfile_user()
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    requests = container["resources"]["requests"]
    assert requests["cpu"] and requests["memory"]
    # The read-only root needs a writable /tmp (the numba cache).
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NUMBA_CACHE_DIR"].startswith("/tmp/")


def test_services_expose_the_metrics_port_of_their_pods():
    services = docs_of("Service")
    assert len(services) == 2
    for service in services:
        selector = service["spec"]["selector"].items()
        pods = [
            d
            for d in DEPLOYMENTS
            if selector <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert pods, service["metadata"]["name"]
        assert service["metadata"]["namespace"] == NAMESPACE
        assert [p["targetPort"] for p in service["spec"]["ports"]] == ["metrics"]


# --------------------------------------------------------------------------- image and kustomize
def dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


def dockerfile_user() -> int:
    (user,) = re.findall(r"^USER\s+(\S+)", dockerfile(), re.M)
    uid = int(user.split(":")[0])  # numeric, so runAsNonRoot can check it
    assert uid != 0
    return uid


def test_image_runs_kai_run_from_the_wheel():
    text = dockerfile()
    (entrypoint,) = re.findall(r"^ENTRYPOINT\s+(.+)$", text, re.M)
    assert json.loads(entrypoint) == ["kai", "run"]
    assert len(re.findall(r"^FROM\s", text, re.M)) == 2  # build stage, runtime stage
    assert "ci/build-wheel" in text and ".whl" in text
    dockerfile_user()


def test_build_context_leaves_host_build_outputs_out():
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    for entry in (".git", ".venv", "build", "dist", "**/*.so"):
        assert entry in ignored


@pytest.mark.parametrize("folder", [DEPLOY, DEPLOY / "shards"], ids=["deploy", "shards"])
def test_kustomizations_list_existing_files(folder):
    (kustomization,) = load(folder / "kustomization.yaml")
    resources = kustomization["resources"]
    for resource in resources:
        assert (folder / resource).is_file(), resource
    if folder == DEPLOY:
        required = {crd_path(k) for k in CRD_KINDS if k.name not in OPTIONAL_KINDS}
        required |= {DEPLOY / "rbac.yaml", DEPLOY / "scheduler.yaml"}
        assert {folder / r for r in resources} == required
    else:
        assert {folder / r for r in resources} == set(folder.glob("*.yaml")) - {
            folder / "kustomization.yaml"
        }


def test_click_rejects_unknown_flags():
    # run_params relies on make_context failing on flags kai run does not have.
    with pytest.raises(click.UsageError):
        cli.run.make_context("run", ["--no-such-flag"])
