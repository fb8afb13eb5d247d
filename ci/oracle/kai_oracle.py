"""Differential harness: kai against an external scheduler, pod by pod.

Seeded random clusters (small GPU clusters with a queue tree, gangs, elastic jobs and
three priority classes) are written in a neutral JSON form (see README.md). kai runs
each one in-process; an *oracle* (any program that reads the same JSON and prints each
pod's end status and node) runs them too; the two are compared pod by pod. A
disagreement can be shrunk to a small reproducer, printed as a kai test.

    python ci/oracle/kai_oracle.py compare --count 200 --oracle 'ORACLE {in} {out}'
    python ci/oracle/kai_oracle.py compare --count 200 --results DIR
    python ci/oracle/kai_oracle.py minimize --seed 17 --set reclaim --oracle '...'
    python ci/oracle/kai_oracle.py generate --count 10 --out DIR
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import random
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

#: The action sets compared by default.
ACTION_SETS: dict[str, list[str]] = {
    "allocate": ["allocate"],
    "consolidation": ["consolidation"],
    "reclaim": ["reclaim"],
    "preempt": ["preempt"],
    "full": ["allocate", "consolidation", "reclaim", "preempt"],
}

#: Priority classes: two preemptible (train, interactive-preemptible), one not (build).
PRIORITIES = (50, 75, 100)

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)

Cluster = dict[str, Any]
Outcome = dict[str, tuple[str, str | None]]  # pod name -> (status, node)


# ----------------------------------------------------------------- generation
def generate(seed: int) -> Cluster:
    """A random cluster: 2-8 nodes, 2-4 queues (some under departments), 3-15 jobs."""
    rng = random.Random(seed)
    uniform = rng.random() < 0.5
    sizes = [2, 4, 8]
    one = rng.choice(sizes)
    nodes: list[dict[str, Any]] = [
        {"name": f"node{i}", "gpus": one if uniform else rng.choice(sizes)}
        for i in range(rng.randint(2, 8))
    ]
    total = sum(n["gpus"] for n in nodes)
    departments: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        for d in range(rng.randint(1, 2)):
            deserved = rng.choice([0, total // 4, total // 2, total])
            limit = -1 if rng.random() < 0.7 else max(1, deserved + rng.randint(0, total // 2))
            departments.append({"name": f"d{d}", "deserved": deserved, "limit": limit})
    queues = []
    for q in range(rng.randint(2, 4)):
        deserved = rng.randint(0, max(1, total // 2))
        limit = -1 if rng.random() < 0.7 else max(1, deserved + rng.randint(0, total // 2))
        parent = rng.choice(departments)["name"] if departments else "default"
        queues.append(
            {
                "name": f"q{q}",
                "parent": parent,
                "deserved": deserved,
                "limit": limit,
                "weight": rng.choice([0, 1, 1, 2]),
            }
        )
    free: dict[str, int] = {n["name"]: n["gpus"] for n in nodes}
    most = max(free.values())
    jobs = []
    for j in range(rng.randint(3, 15)):
        gpus = rng.choice([g for g in (1, 1, 1, 2, 4) if g <= most])
        kind = rng.random()
        if kind < 0.55:
            size, min_member = 1, 1
        elif kind < 0.8:
            size = rng.randint(2, 4)
            min_member = size  # a gang
        else:
            size = rng.randint(2, 4)
            min_member = rng.randint(1, size - 1)  # elastic
        running = 0
        if rng.random() < 0.6:
            running = size if min_member == size else rng.randint(min_member, size)
        tasks: list[dict[str, Any]] = []
        trial = dict(free)
        for i in range(size):
            if i < running:
                fits = [name for name, g in trial.items() if g >= gpus]
                if not fits:
                    break
                node = rng.choice(sorted(fits))
                trial[node] -= gpus
                tasks.append({"state": "Running", "node": node})
            else:
                tasks.append({"state": "Pending"})
        if len(tasks) < size:  # did not fit: pending instead
            tasks = [{"state": "Pending"} for _ in range(size)]
        else:
            free = trial
        jobs.append(
            {
                "name": f"j{j:02d}",
                "queue": rng.choice(queues)["name"],
                "priority": rng.choice(PRIORITIES),
                "gpus": gpus,
                "minMember": min_member,
                "tasks": tasks,
            }
        )
    return {
        "seed": seed,
        "nodes": nodes,
        "departments": departments,
        "queues": queues,
        "jobs": canonical_jobs(jobs),
    }


def canonical_jobs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Jobs in creation order (oldest first): priority descending, then as listed."""
    return sorted(jobs, key=lambda j: -j["priority"])


# ----------------------------------------------------------------- kai's side
def _ts(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def _queue(name: str, deserved: float, limit: float, weight: float, parent: str | None, k: int):
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": deserved, "limit": limit, "overQuotaWeight": weight},
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name, "creationTimestamp": _ts(NOW + timedelta(minutes=k))},
        "spec": spec,
    }


def manifests(cluster: Cluster) -> list[dict[str, Any]]:
    """The cluster as kai's input objects.

    Conventions: nodes have 20,000 CPUs and 20G of memory; a task asks for 1 CPU, 1G
    and its GPUs; job k of n (in creation order) was created n - k minutes before NOW,
    and a job with running pods started a minute before NOW; queue k of its list (leaf
    queues and departments counted apart) was created k minutes after NOW; a
    department's GPU over-quota weight is its deserved GPUs; without departments every
    queue is under an unlimited department ``default``.
    """
    objs: list[dict[str, Any]] = []
    for n in cluster["nodes"]:
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": n["name"],
                    "labels": {
                        "nvidia.com/gpu.count": str(n["gpus"]),
                        "nvidia.com/gpu.memory": "100",
                    },
                },
                "status": {
                    "allocatable": {
                        "cpu": "20000",
                        "memory": "20G",
                        "pods": "110",
                        "nvidia.com/gpu": str(n["gpus"]),
                    },
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    departments = cluster["departments"]
    if not departments:
        objs.append(_queue("default", -1, -1, 1, None, 0))
    for k, d in enumerate(departments):
        weight = d["deserved"] if d["deserved"] >= 0 else 1
        objs.append(_queue(d["name"], d["deserved"], d["limit"], weight, None, k))
    for k, q in enumerate(cluster["queues"]):
        objs.append(_queue(q["name"], q["deserved"], q["limit"], q["weight"], q["parent"], k))
    jobs = cluster["jobs"]
    for value in sorted({j["priority"] for j in jobs}):
        objs.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": f"p{value}"},
                "value": value,
            }
        )
    for k, job in enumerate(jobs):
        created = NOW - timedelta(minutes=len(jobs) - k)
        annotations = {}
        if any(t["state"] in ("Running", "Releasing") for t in job["tasks"]):
            annotations["kai.scheduler/last-start-timestamp"] = _ts(NOW - timedelta(minutes=1))
        objs.append(
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {
                    "name": job["name"],
                    "namespace": "ns",
                    "uid": job["name"],
                    "creationTimestamp": _ts(created),
                    "annotations": annotations,
                },
                "spec": {
                    "minMember": job.get("minMember", len(job["tasks"])),
                    "queue": job["queue"],
                    "priorityClassName": f"p{job['priority']}",
                },
            }
        )
        for i, task in enumerate(job["tasks"]):
            requests: dict[str, Any] = {"cpu": "1", "memory": "1G"}
            if job["gpus"]:
                requests["nvidia.com/gpu"] = str(job["gpus"])
            pod: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job['name']}-{i}",
                    "namespace": "ns",
                    "uid": f"{job['name']}-{i}",
                    "annotations": {"pod-group-name": job["name"]},
                    "creationTimestamp": _ts(created),
                },
                "spec": {
                    "schedulerName": "kai-scheduler",
                    "containers": [{"name": "c", "resources": {"requests": requests}}],
                },
                "status": {"phase": "Pending"},
            }
            if task["state"] in ("Running", "Releasing"):
                pod["spec"]["nodeName"] = task["node"]
                pod["status"]["phase"] = "Running"
                if task["state"] == "Releasing":
                    pod["metadata"]["deletionTimestamp"] = _ts(NOW)
            objs.append(pod)
    return objs


def run_kai(cluster: Cluster, actions: list[str], differs: list[str] | None = None) -> Outcome:
    """kai's end state of every pod; ``differs`` receives where kai decided differently
    from KAI-Scheduler on purpose in the session (the ``kai_differs`` debug records:
    ``overcommit``, where it declined KAI's over-commit, and ``last_probe``, where its
    last probe of a whole job found victims KAI's solver does not look for)."""
    import logging

    import kai

    class Differs(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if differs is not None and hasattr(record, "kai_differs"):
                differs.append(record.kai_differs)

    logger = logging.getLogger("kai")
    handler, level = Differs(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        snapshot = kai.Snapshot.from_objects(manifests(cluster))
        result = kai.run_session(snapshot, actions=actions, now=NOW)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return {key.split("/", 1)[1]: (p.status, p.node) for key, p in result.pods.items()}


# ----------------------------------------------------------------- the oracle
class Oracle:
    """An external scheduler: a command run as ``CMD IN_DIR OUT_DIR`` (``{in}`` and
    ``{out}`` in the command are replaced, else both are appended), or a directory of
    results computed beforehand."""

    def __init__(self, command: str | None = None, results: Path | None = None) -> None:
        if (command is None) == (results is None):
            raise ValueError("give the oracle as a command or as a directory of results")
        self.command = command
        self.results = results

    def run(self, inputs: dict[str, Cluster]) -> dict[str, Outcome | str]:
        """Outcomes by input name (an error message where the oracle gave one)."""
        if self.results is not None:
            return {name: _read_result(self.results / f"{name}.json") for name in inputs}
        assert self.command is not None
        with tempfile.TemporaryDirectory(prefix="kai-oracle-") as tmp:
            src, dst = Path(tmp, "in"), Path(tmp, "out")
            src.mkdir()
            write_inputs(src, inputs)
            cmd = self.command
            if "{in}" in cmd or "{out}" in cmd:
                cmd = cmd.replace("{in}", shlex.quote(str(src))).replace(
                    "{out}", shlex.quote(str(dst))
                )
            else:
                cmd = f"{cmd} {shlex.quote(str(src))} {shlex.quote(str(dst))}"
            subprocess.run(cmd, shell=True, check=True)
            return {name: _read_result(dst / f"{name}.json") for name in inputs}


def write_inputs(directory: Path, inputs: dict[str, Cluster]) -> None:
    for name, cluster in inputs.items():
        (directory / f"{name}.json").write_text(json.dumps(cluster, indent=1) + "\n")


class OracleOutcome(dict):
    """An oracle's :data:`Outcome`, with the pods it reports having evicted twice for
    one placement (``evicted_twice``, see :func:`explanation`); compares as a dict."""

    evicted_twice: tuple[str, ...] = ()


def _read_result(path: Path) -> Outcome | str:
    if not path.exists():
        return f"no result {path.name}"
    data = json.loads(path.read_text())
    if "error" in data:
        return str(data["error"])
    out = OracleOutcome(
        {name: (p["status"], p.get("node") or None) for name, p in data["pods"].items()}
    )
    out.evicted_twice = tuple(data.get("evicted_twice") or ())
    return out


# ----------------------------------------------------------------- comparison
def differences(kai_out: Outcome, oracle_out: Outcome) -> list[str]:
    """One line per pod whose end status or node differs."""
    lines = []
    for pod in sorted(kai_out.keys() | oracle_out.keys()):
        a, b = kai_out.get(pod), oracle_out.get(pod)
        if a != b:
            lines.append(f"{pod}: kai {_fmt(a)}, oracle {_fmt(b)}")
    return lines


#: Statuses that hold a place on a node for good (a releasing pod's place is reusable).
_HOLDING = ("Running", "Binding", "Pipelined")


def overcommitted(cluster: Cluster, outcome: Outcome) -> list[str]:
    """The nodes on which ``outcome`` holds more GPUs than the node has: KAI-Scheduler
    does that when it evicts a pod it pipelined earlier in the session (see
    docs/kai-differences.md); kai never does."""
    gpus = {
        f"{job['name']}-{i}": job["gpus"]
        for job in cluster["jobs"]
        for i in range(len(job["tasks"]))
    }
    held: dict[str, float] = {}
    for pod, (status, node) in outcome.items():
        if node and status in _HOLDING:
            held[node] = held.get(node, 0.0) + gpus.get(pod, 0.0)
    size = {n["name"]: n["gpus"] for n in cluster["nodes"]}
    return sorted(n for n, used in held.items() if used > size.get(n, 0) + 1e-9)


def reported_elsewhere(cluster: Cluster, kai_out: Outcome, oracle_out: Outcome) -> bool:
    """Whether the two differ only in pods the oracle reports releasing where kai does
    not, as documented in docs/kai-differences.md: a moved victim evicted again, which
    KAI-Scheduler reports releasing on the node it had been moved to (kai: on the node
    it runs on), and a pod the cluster had not bound (pending in the input) that the
    session placed and then evicted, which KAI-Scheduler reports releasing on that node
    (kai never evicts a pod the cluster has not bound: it is pending again)."""
    runs_on = {
        f"{job['name']}-{i}": task.get("node")
        for job in cluster["jobs"]
        for i, task in enumerate(job["tasks"])
    }

    def explained(pod: str) -> bool:
        ours, theirs = kai_out.get(pod), oracle_out.get(pod)
        if ours is None or theirs is None or theirs[0] != "Releasing":
            return False
        if runs_on.get(pod) is None:
            return ours == ("Pending", None)
        return ours == ("Releasing", runs_on[pod])

    pods = kai_out.keys() | oracle_out.keys()
    differing = [p for p in pods if kai_out.get(p) != oracle_out.get(p)]
    return bool(differing) and all(explained(p) for p in differing)


def _fmt(got: tuple[str, str | None] | None) -> str:
    if got is None:
        return "absent"
    status, node = got
    return f"{status}@{node}" if node else status


def with_actions(cluster: Cluster, actions: list[str]) -> Cluster:
    out = dict(cluster)
    out["actions"] = actions
    return out


def compare(
    seeds: list[int], sets: list[str], oracle: Oracle, show: int, runs: int = 1
) -> dict[str, Tally]:
    """Per action set: how the clusters compare (see :class:`Tally`).  The oracle runs
    ``runs`` times: KAI-Scheduler decides some clusters differently from run to run (it
    iterates Go maps), and kai agrees when it matches any of its decisions."""
    inputs = {
        f"{name}-{seed}": with_actions(generate(seed), ACTION_SETS[name])
        for name in sets
        for seed in seeds
    }
    results = [oracle.run(inputs) for _ in range(runs)]
    table: dict[str, Tally] = {}
    for name in sets:
        tally = table[name] = Tally()
        for seed in seeds:
            key = f"{name}-{seed}"
            outcomes = [run[key] for run in results]
            error = next((o for o in outcomes if isinstance(o, str)), None)
            if error is not None:
                print(f"{key}: oracle error: {error}", file=sys.stderr)
                continue
            tally.total += 1
            differs: list[str] = []
            ours = run_kai(inputs[key], ACTION_SETS[name], differs)
            theirs = outcomes[0]
            diff = differences(ours, theirs)
            if not diff or ours in outcomes:
                tally.agree += 1
            elif any(o != theirs for o in outcomes):
                tally.unsettled.append(key)
            elif (why := explanation(inputs[key], ours, theirs, differs)) is not None:
                getattr(tally, why).append(key)
            else:
                tally.disagree.append(key)
                if len(tally.disagree) <= show:
                    print(f"--- {key}", *diff, sep="\n  ")
    return table


def explanation(
    cluster: Cluster, kai_out: Outcome, oracle_out: Outcome, differs: list[str]
) -> str | None:
    """The documented difference (docs/kai-differences.md) that explains why kai and the
    oracle disagree on ``cluster``, as a :class:`Tally` field name; None if none does.
    ``differs``: the ``kai_differs`` records of kai's session (:func:`run_kai`)."""
    if overcommitted(cluster, oracle_out) or "overcommit" in differs:
        return "overcommit"
    if "last_probe" in differs:
        return "last_probe"
    if reported_elsewhere(cluster, kai_out, oracle_out):
        return "reported_elsewhere"
    if getattr(oracle_out, "evicted_twice", ()):
        # KAI-Scheduler evicted a pod twice for one placement (a victim listed twice in
        # one scenario), crediting its queue twice: the oracle's driver reports it.
        return "evicted_twice"
    if "withdrawn" in differs:
        # kai placed again a pod whose bind or pipeline an eviction had withdrawn (it was
        # pending again); KAI-Scheduler has it releasing, and no later action places it.
        return "withdrawn"
    return None


@dataclass
class Tally:
    """One action set's comparison: clusters agreeing pod by pod (with one of the
    oracle's decisions), clusters where the oracle decides differently from run to run,
    clusters a documented KAI-Scheduler defect kai does not copy explains (the oracle
    over-commits a node, or reports a pod releasing that kai does not evict), and the
    other disagreements."""

    agree: int = 0
    total: int = 0
    overcommit: list[str] = dataclasses.field(default_factory=list)
    unsettled: list[str] = dataclasses.field(default_factory=list)  # oracle runs differ
    last_probe: list[str] = dataclasses.field(default_factory=list)  # kai's last probe
    reported_elsewhere: list[str] = dataclasses.field(default_factory=list)
    evicted_twice: list[str] = dataclasses.field(default_factory=list)  # oracle's log
    withdrawn: list[str] = dataclasses.field(default_factory=list)  # placed again by kai
    disagree: list[str] = dataclasses.field(default_factory=list)


# ----------------------------------------------------------------- minimizing
def _smaller(cluster: Cluster) -> Iterator[Cluster]:
    """Clusters one step smaller or simpler than ``cluster`` (still well formed)."""
    jobs = cluster["jobs"]
    for i in range(len(jobs)):
        yield {**cluster, "jobs": jobs[:i] + jobs[i + 1 :]}
    for i, job in enumerate(jobs):
        tasks = job["tasks"]
        for k in range(len(tasks)):
            if len(tasks) == 1:
                break
            fewer = tasks[:k] + tasks[k + 1 :]
            smaller = {**job, "tasks": fewer, "minMember": min(job["minMember"], len(fewer))}
            yield {**cluster, "jobs": jobs[:i] + [smaller] + jobs[i + 1 :]}
        if job["priority"] != PRIORITIES[0]:
            changed = {**job, "priority": PRIORITIES[0]}
            yield {**cluster, "jobs": canonical_jobs(jobs[:i] + [changed] + jobs[i + 1 :])}
        if job["gpus"] > 1:
            yield _set_job(cluster, i, gpus=job["gpus"] // 2)
        if job["minMember"] < len(job["tasks"]):
            yield _set_job(cluster, i, minMember=len(job["tasks"]))
    used = {t.get("node") for j in jobs for t in j["tasks"]}
    for i, node in enumerate(cluster["nodes"]):
        if node["name"] not in used:
            yield {**cluster, "nodes": cluster["nodes"][:i] + cluster["nodes"][i + 1 :]}
        if node["gpus"] > 1:
            nodes = copy.deepcopy(cluster["nodes"])
            nodes[i]["gpus"] //= 2
            yield {**cluster, "nodes": nodes}
    queued = {j["queue"] for j in jobs}
    for i, q in enumerate(cluster["queues"]):
        if q["name"] not in queued:
            yield {**cluster, "queues": cluster["queues"][:i] + cluster["queues"][i + 1 :]}
        for field, value in (("limit", -1), ("weight", 1), ("deserved", 0)):
            if q[field] != value:
                queues = copy.deepcopy(cluster["queues"])
                queues[i][field] = value
                yield {**cluster, "queues": queues}
    parents = {q["parent"] for q in cluster["queues"]}
    for i, d in enumerate(cluster["departments"]):
        if d["name"] not in parents:
            depts = cluster["departments"][:i] + cluster["departments"][i + 1 :]
            yield {**cluster, "departments": depts}
        if d["limit"] != -1:
            depts = copy.deepcopy(cluster["departments"])
            depts[i]["limit"] = -1
            yield {**cluster, "departments": depts}


def _set_job(cluster: Cluster, index: int, **changes: Any) -> Cluster:
    jobs = list(cluster["jobs"])
    jobs[index] = {**jobs[index], **changes}
    return {**cluster, "jobs": jobs}


def _valid(cluster: Cluster) -> bool:
    """Running tasks fit their nodes."""
    free = {n["name"]: n["gpus"] for n in cluster["nodes"]}
    for job in cluster["jobs"]:
        for task in job["tasks"]:
            node = task.get("node")
            if node is not None:
                if node not in free:
                    return False
                free[node] -= job["gpus"]
    return all(v >= 0 for v in free.values())


def minimize(
    cluster: Cluster, actions: list[str], oracle: Oracle, log: Callable[[str], None] = print
) -> Cluster:
    """Shrink ``cluster`` while kai and the oracle still disagree on it."""
    cluster = with_actions(cluster, actions)
    start = oracle.run({"start": cluster})["start"]
    # A disagreement a documented difference explains shrinks only to another one; any
    # other shrinks only to another that none explains.
    differs: list[str] = []
    ours = run_kai(cluster, actions, differs)
    explained = (
        not isinstance(start, str) and explanation(cluster, ours, start, differs) is not None
    )
    rounds = 0
    while True:
        rounds += 1
        candidates = [c for c in _smaller(cluster) if _valid(c)]
        if not candidates:
            return cluster
        names = {f"c{i:04d}": c for i, c in enumerate(candidates)}
        results = oracle.run(names)
        for name, cand in names.items():
            theirs = results[name]
            if isinstance(theirs, str):
                continue
            differs = []
            ours = run_kai(cand, actions, differs)
            if not explained and explanation(cand, ours, theirs, differs) is not None:
                continue
            if differences(ours, theirs):
                cluster = cand
                log(f"round {rounds}: {_size(cluster)}")
                break
        else:
            return cluster


def _size(cluster: Cluster) -> str:
    tasks = sum(len(j["tasks"]) for j in cluster["jobs"])
    return f"{len(cluster['nodes'])} nodes, {len(cluster['jobs'])} jobs, {tasks} pods"


def as_test(cluster: Cluster, outcome: Outcome, name: str) -> str:
    """A kai test stating the cluster, the actions and every pod's end state."""
    nodes = ", ".join(f'"{n["name"]}": {n["gpus"]}' for n in cluster["nodes"])
    lines = [f"def test_{name}() -> None:", f"    nodes = {{{nodes}}}"]
    if cluster["departments"]:
        lines.append("    departments = [")
        for k, d in enumerate(cluster["departments"]):
            lines.append(f'        dept("{d["name"]}", {d["deserved"]}, {d["limit"]}, {k}),')
        lines.append("    ]")
    else:
        lines.append("    departments = None")
    lines.append("    queues = [")
    for k, q in enumerate(cluster["queues"]):
        lines.append(
            f'        leaf("{q["name"]}", {q["deserved"]}, {q["limit"]}, {q["weight"]}, '
            f'"{q["parent"]}", {k}),'
        )
    lines.append("    ]")
    lines.append("    jobs = [")
    for job in cluster["jobs"]:
        tasks = ", ".join(
            f'T("Running", "{t["node"]}")' if t["state"] == "Running" else f'T("{t["state"]}")'
            for t in job["tasks"]
        )
        extra = ""
        if job["minMember"] != len(job["tasks"]):
            extra = f", min_member={job['minMember']}"
        lines.append(
            f'        J("{job["name"]}", "{job["queue"]}", [{tasks}], gpus={job["gpus"]}, '
            f"priority={job['priority']}{extra}),"
        )
    lines.append("    ]")
    snapshot = "build(nodes, queues, jobs, departments=departments)"
    lines.append(f"    result = run({snapshot}, {cluster['actions']})")
    lines.append("    assert statuses(result) == {")
    for pod in sorted(outcome):
        status, node = outcome[pod]
        lines.append(f'        "{pod}": ("{status}", {json.dumps(node)}),'.replace("null", "None"))
    lines.append("    }")
    return "\n".join(lines)


# ----------------------------------------------------------------- command line
def _oracle_from(args: argparse.Namespace) -> Oracle:
    return Oracle(args.oracle, Path(args.results) if args.results else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    gen = sub.add_parser("generate", help="write random clusters (one file per action set)")
    cmp_ = sub.add_parser("compare", help="compare kai with the oracle on random clusters")
    mini = sub.add_parser("minimize", help="shrink one disagreement to a reproducer")
    for p in (gen, cmp_):
        p.add_argument("--count", type=int, default=200, help="clusters per action set")
        p.add_argument("--first-seed", type=int, default=0)
        p.add_argument("--sets", default=",".join(ACTION_SETS), help="action sets to use")
    gen.add_argument("--out", required=True, help="directory to write NAME-SEED.json into")
    for p in (cmp_, mini):
        p.add_argument("--oracle", help="command run as CMD IN_DIR OUT_DIR")
        p.add_argument("--results", help="directory of oracle results NAME.json")
    cmp_.add_argument("--show", type=int, default=5, help="disagreements printed per set")
    cmp_.add_argument("--json", help="write the table and the disagreeing inputs here")
    cmp_.add_argument(
        "--oracle-runs", type=int, default=1, help="run the oracle this many times (default 1)"
    )
    mini.add_argument("--seed", type=int, required=True)
    mini.add_argument("--set", required=True, choices=list(ACTION_SETS))
    mini.add_argument("--name", default="reproducer", help="name of the printed test")
    args = parser.parse_args(argv)

    if args.cmd == "generate":
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name in args.sets.split(","):
            seeds = list(range(args.first_seed, args.first_seed + args.count))
            inputs = {f"{name}-{s}": with_actions(generate(s), ACTION_SETS[name]) for s in seeds}
            write_inputs(out, inputs)
        return 0
    oracle = _oracle_from(args)
    if args.cmd == "compare":
        seeds = list(range(args.first_seed, args.first_seed + args.count))
        table = compare(seeds, args.sets.split(","), oracle, args.show, args.oracle_runs)
        print(
            "\n| action set | kai agrees with the oracle pod by pod | the oracle over-commits "
            "a node (at the end or during the session) | the oracle reports a pod releasing "
            "that kai does not evict (runs elsewhere, or was never bound) "
            "| the oracle decides differently from run to run "
            "| kai's last probe finds victims "
            "| the oracle evicts a victim twice "
            "| kai places again a pod whose placement an eviction withdrew "
            "| other disagreements |\n|---|---|---|---|---|---|---|---|---|"
        )
        for name, t in table.items():
            share = 100.0 * t.agree / t.total if t.total else 0.0
            print(
                f"| {', '.join(ACTION_SETS[name])} | {t.agree}/{t.total} ({share:.1f}%) "
                f"| {len(t.overcommit)} | {len(t.reported_elsewhere)} | {len(t.unsettled)} "
                f"| {len(t.last_probe)} | {len(t.evicted_twice)} | {len(t.withdrawn)} "
                f"| {len(t.disagree)} |"
            )
        if args.json:
            Path(args.json).write_text(
                json.dumps({k: asdict(t) for k, t in table.items()}, indent=1)
            )
        return 0
    actions = ACTION_SETS[args.set]
    small = minimize(generate(args.seed), actions, oracle, log=lambda s: print(s, file=sys.stderr))
    theirs = oracle.run({"final": small})["final"]
    if isinstance(theirs, str):
        print(f"oracle error: {theirs}", file=sys.stderr)
        return 1
    print(json.dumps(small))
    print("\n".join(differences(run_kai(small, actions), theirs)), file=sys.stderr)
    print(as_test(small, theirs, args.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
