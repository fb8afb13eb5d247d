"""Statements, tier semantics and the plugin API (scalar and batch forms)."""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timezone

import numpy as np
import pytest

import kai
from kai.api.model import Job, TaskStatus
from kai.api.objects import PodGroupObject
from kai.config import SchedulerConfig
from kai.framework import Plugin, register_plugin
from kai.framework.session import Session
from kai.framework.statement import DIFFERS
from tests.factory import node, pod, queue, run, statuses

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)


def session(objs, plugins=("predicates", "proportion")):
    snap = kai.Snapshot.from_objects(objs)
    config = SchedulerConfig.from_object(None)
    config.tiers = [[kai.api.objects.PluginOption(p) for p in plugins]]
    ssn = Session(snap.state(), config, now=NOW)
    ssn.open(config.build_plugins())
    return ssn


def test_rollback_restores_nodes_tasks_and_queue_accounting():
    ssn = session(
        [
            node("n1", gpus=4),
            queue("q"),
            pod("a", gpus=2, queue="q"),
            pod("b", gpus=1, queue="q", node="n1"),
        ]
    )
    nodes = ssn.nodes
    idle, releasing = nodes.idle.copy(), nodes.releasing.copy()
    a = ssn.jobs["default/a"].tasks[0]
    b = ssn.jobs["default/b"].tasks[0]
    share = ssn.cache["proportion"].shares["q"]
    allocated = share.allocated.copy()
    stmt = ssn.statement()
    stmt.allocate(a, 0)
    cp = stmt.checkpoint()
    stmt.evict(b, "test")
    assert b.status is TaskStatus.RELEASING and nodes.releasing[0, 2] == 1
    stmt.rollback(cp)
    assert b.status is TaskStatus.RUNNING and nodes.releasing[0, 2] == 0
    assert a.status is TaskStatus.ALLOCATED and nodes.idle[0, 2] == 1
    stmt.discard()
    assert a.status is TaskStatus.PENDING and a.node == -1
    np.testing.assert_array_equal(nodes.idle, idle)
    np.testing.assert_array_equal(nodes.releasing, releasing)
    np.testing.assert_array_equal(share.allocated, allocated)
    assert ssn.decisions == []


def test_queue_versions_set_back_after_a_change_undone_exactly():
    """Inside the block the changed pods' queues and their ancestors carry versions no
    state had (and no later bump makes); after it, the ones they had, whatever was
    bumped inside."""
    ssn = session(
        [
            node("n1", gpus=4),
            queue("root"),
            queue("a", parent="root"),
            queue("b", parent="root"),
            pod("x", gpus=1, queue="a", node="n1"),
            pod("y", gpus=1, queue="b", node="n1"),
        ]
    )
    x = ssn.jobs["default/x"].tasks[0]
    y = ssn.jobs["default/y"].tasks[0]
    ssn.bump_queue_versions(x)
    ssn.bump_queue_versions(y)
    before, epoch = dict(ssn.queue_versions), ssn.queue_epoch
    used: set[int] = set()
    for _ in range(2):
        with ssn.set_back_queue_versions([x]):
            inside = dict(ssn.queue_versions)
            assert inside["b"] == before["b"]  # y's queue alone is not x's
            fresh = {inside["a"], inside["root"], ssn.queue_epoch}
            assert len(fresh) == 3 and all(v < 0 for v in fresh) and not fresh & used
            used |= fresh
            ssn.bump_queue_versions(x)
        assert dict(ssn.queue_versions) == before and ssn.queue_epoch == epoch
    ssn.bump_queue_versions(x)
    assert ssn.queue_versions["a"] == before["a"] + 1 and ssn.queue_epoch == epoch + 1


def test_commit_turns_operations_into_decisions():
    ssn = session(
        [
            node("n1", gpus=4),
            queue("q"),
            pod("a", gpus=2, queue="q"),
            pod("b", gpus=1, queue="q", node="n1"),
        ]
    )
    ssn.current_action = "test"
    a = ssn.jobs["default/a"].tasks[0]
    b = ssn.jobs["default/b"].tasks[0]
    stmt = ssn.statement()
    stmt.evict(b, "make room")
    stmt.pipeline(a, 0)
    stmt.commit()
    assert [(d.type, d.task.name, d.node) for d in ssn.decisions] == [
        ("evict", "b", "n1"),
        ("pipeline", "a", "n1"),
    ]
    assert b.status is TaskStatus.RELEASING and a.status is TaskStatus.PIPELINED


def test_pipeline_back_onto_the_same_node_unevicts():
    ssn = session([node("n1", gpus=4), queue("q"), pod("b", gpus=1, queue="q", node="n1")])
    b = ssn.jobs["default/b"].tasks[0]
    stmt = ssn.statement()
    stmt.evict(b, "try")
    cp = stmt.checkpoint()
    stmt.pipeline(b, 0)
    assert b.status is TaskStatus.RUNNING and not stmt.evicted_tasks()
    stmt.rollback(cp)  # rolling back past the un-evict evicts the task again
    assert b.status is TaskStatus.RELEASING and stmt.evicted_tasks() == [b]
    stmt.pipeline(b, 0)
    assert stmt.commit() == []  # an eviction undone in the statement never leaves it


@pytest.mark.parametrize("seed", range(5))
def test_a_statement_finds_each_pods_standing_eviction_through_any_rollback(seed: int):
    """Evictions, moves, un-evictions (a pod put back on its node) and rollbacks in a
    random order: the eviction a statement finds for each pod is the latest of its
    operations that evicts it and is not undone."""
    rng = np.random.default_rng(seed)
    objs = [node(f"n{i}", gpus=4) for i in range(3)] + [queue("q")]
    objs += [pod(f"p{i}", gpus=1, queue="q", node=f"n{i % 3}") for i in range(6)]
    ssn = session(objs)
    tasks = [job.tasks[0] for job in ssn.jobs.values()]
    stmt = ssn.statement()
    checkpoints: list[int] = []
    unevicted = rolled_back = 0
    for _ in range(200):
        task = tasks[rng.integers(len(tasks))]
        step = rng.integers(4)
        if step == 0 and task.status is TaskStatus.RUNNING:
            stmt.evict(task, "try")
        elif step == 1 and task.status is TaskStatus.RELEASING:
            stmt.pipeline(task, int(rng.integers(3)))  # back on its node: un-evicted
            unevicted += stmt.ops[-1].kind == "unevict"
        elif step == 2:
            checkpoints.append(stmt.checkpoint())
        elif step == 3 and checkpoints:
            before = len(stmt.ops)
            stmt.rollback(checkpoints.pop(rng.integers(len(checkpoints))))
            rolled_back += len(stmt.ops) < before
            checkpoints = [c for c in checkpoints if c <= stmt.checkpoint()]
        for each in tasks:
            found = next(
                (
                    op
                    for op in reversed(stmt.ops)
                    if op.task is each and op.kind == "evict" and not op.undone
                ),
                None,
            )
            assert stmt._eviction_of(each) is found
    assert unevicted > 0 and rolled_back > 0, (unevicted, rolled_back)  # the mix is exercised


def _mixed_pods(running: int) -> list[dict]:
    """Three 4-GPU nodes, two queues, ``running`` one-GPU pods on them (inexact CPU
    requests), a fractional pod beside, and three pending pods."""
    objs = [node(f"n{i}", gpus=4) for i in range(3)] + [queue("q"), queue("r")]
    objs += [
        pod(f"p{i}", gpus=1, cpu="0.3", queue="qr"[i % 2], node=f"n{i % 3}") for i in range(running)
    ]
    objs += [pod("half", gpus=0.5, cpu="0.1", queue="q", node="n0")]
    objs += [pod(f"w{i}", gpus=1, cpu="0.7", queue="r") for i in range(3)]
    return objs


@pytest.mark.parametrize("seed", range(4))
def test_an_eviction_and_its_undo_charge_the_rows_as_removing_and_adding_the_pod(
    seed: int, monkeypatch
):
    """Evicting a pod on whole GPUs, and undoing that, change its status on its node in
    one step (NodeTable.restatus): random evictions, moves, un-evictions, placements and
    rollbacks (inexact CPU requests, fractional pods beside) leave the same rows, to the
    bit, the same pods per node and the same queue accounting, step by step, as
    removing the pod, setting its status and adding it again."""
    from kai.api.model import NodeTable

    def run_ops() -> list:
        rng = np.random.default_rng(seed)
        ssn = session(_mixed_pods(running=6))
        nodes, shares = ssn.nodes, ssn.cache["proportion"].shares
        tasks = [job.tasks[0] for job in ssn.jobs.values()]
        stmt = ssn.statement()
        checkpoints: list[int] = []
        seen = []
        for _ in range(300):
            task = tasks[rng.integers(len(tasks))]
            step = rng.integers(5)
            if step == 0 and task.status in (TaskStatus.RUNNING, TaskStatus.PIPELINED):
                stmt.evict(task, "try")
            elif step == 1 and task.status in (TaskStatus.RELEASING, TaskStatus.PENDING):
                stmt.pipeline(task, int(rng.integers(3)))
            elif step == 2:
                checkpoints.append(stmt.checkpoint())
            elif step == 3 and checkpoints:
                stmt.rollback(checkpoints.pop(rng.integers(len(checkpoints))))
                checkpoints = [c for c in checkpoints if c <= stmt.checkpoint()]
            elif step == 4 and task.status is TaskStatus.PENDING:
                stmt.allocate(task, int(rng.integers(3)))
            seen.append(
                (
                    nodes.used.tobytes(),
                    nodes.idle.tobytes(),
                    nodes.releasing.tobytes(),
                    [sorted(t.uid for t in on) for on in nodes.tasks],
                    [(t.status, t.node, t.virtually_evicted) for t in tasks],
                    [share.allocated.tobytes() for share in shares.values()],
                )
            )
        stmt.discard()
        return seen

    calls: list[TaskStatus] = []
    restatus = NodeTable.restatus

    def counted(table, task, status):
        calls.append(status)
        restatus(table, task, status)

    monkeypatch.setattr(NodeTable, "restatus", counted)
    in_one_step = run_ops()
    # Evictions and their undos took the one step.
    assert {TaskStatus.RELEASING, TaskStatus.RUNNING} <= set(calls)

    def removed_and_added(table, task, status):
        table.remove_task(task)
        task.status = status
        table.add_task(task)

    monkeypatch.setattr(NodeTable, "restatus", removed_and_added)
    assert run_ops() == in_one_step


@pytest.mark.parametrize("seed", range(4))
def test_evicting_many_pods_at_once_and_rolling_back_does_what_one_by_one_does(
    seed: int, monkeypatch
):
    """Statement.evict_all, and a rollback over many evictions, change the pods, rows,
    queue accounting and versions and the statement's operations as evicting and
    undoing one pod at a time does, step by step: among pods placed in the session,
    fractional pods, pods already evicted, a pod twice in one batch, and a plugin whose
    event handler takes no batch (everything one by one then)."""

    def run_ops(one_by_one: bool, with_tracker: bool) -> list:
        rng = np.random.default_rng(seed)
        tracker = ("namespace-allocation-tracker",) if with_tracker else ()
        ssn = session(_mixed_pods(running=9), ("predicates", "proportion", *tracker))
        nodes, shares = ssn.nodes, ssn.cache["proportion"].shares
        tasks = [job.tasks[0] for job in ssn.jobs.values()]
        stmt = ssn.statement()
        checkpoints: list[int] = []
        seen = []
        for _ in range(120):
            step = rng.integers(4)
            if step == 0:
                chosen = [tasks[i] for i in rng.integers(len(tasks), size=int(rng.integers(1, 8)))]
                chosen = [t for t in chosen if t.status is not TaskStatus.PENDING]
                if one_by_one:
                    for task in chosen:
                        stmt.evict(task, "try")
                else:
                    stmt.evict_all(chosen, "try")
            elif step == 1:
                task = tasks[rng.integers(len(tasks))]
                if task.status in (TaskStatus.RELEASING, TaskStatus.PENDING):
                    stmt.pipeline(task, int(rng.integers(3)))
            elif step == 2:
                checkpoints.append(stmt.checkpoint())
            elif checkpoints:
                stmt.rollback(checkpoints.pop(rng.integers(len(checkpoints))))
                checkpoints = [c for c in checkpoints if c <= stmt.checkpoint()]
            seen.append(
                (
                    nodes.used.tobytes(),
                    nodes.idle.tobytes(),
                    nodes.releasing.tobytes(),
                    nodes.version,
                    [sorted(t.uid for t in on) for on in nodes.tasks],
                    [(t.status, t.node, t.gpu_group, t.virtually_evicted) for t in tasks],
                    [share.allocated.tobytes() for share in shares.values()],
                    [share.allocated_non_preemptible.tobytes() for share in shares.values()],
                    dict(ssn.queue_versions),
                    ssn.queue_epoch,
                    [
                        (op.kind, op.task.uid, op.prev_status, op.prev_node, op.undone)
                        for op in stmt.ops
                    ],
                    {t.uid: stmt._eviction_of(t) is not None for t in tasks},
                    dict(ssn.cache.get("namespace-allocation-tracker", {})),
                )
            )
        stmt.discard()
        return seen

    batches: list[int] = []
    bump_all = Session._bump_all

    def counted(self, tasks):
        batches.append(len(tasks))
        bump_all(self, tasks)

    monkeypatch.setattr(Session, "_bump_all", counted)
    together = run_ops(one_by_one=False, with_tracker=False)
    assert max(batches) > 1  # pods evicted, and put back, together
    with monkeypatch.context() as m:
        m.setattr(Session, "batches_events", lambda self: False)  # rollback one by one too
        assert run_ops(one_by_one=True, with_tracker=False) == together
    # A handler with no batch form: evict_all and rollback go one by one themselves.
    assert run_ops(one_by_one=False, with_tracker=True) == run_ops(
        one_by_one=True, with_tracker=True
    )


def test_a_moved_pod_evicted_again_and_put_back_where_it_runs_returns_where_it_was_moved():
    ssn = session(
        [node("n1", gpus=2), node("n2", gpus=2), queue("q"), pod("b", gpus=1, queue="q", node="n1")]
    )
    nodes = ssn.nodes
    b = ssn.jobs["default/b"].tasks[0]
    first = ssn.statement()
    first.evict(b, "move")
    first.pipeline(b, 1)  # moved to n2; its place on n1 stays releasing
    first.commit()
    idle, releasing = nodes.idle.copy(), nodes.releasing.copy()
    again = ssn.statement()
    again.evict(b, "move again")  # undoes the move: releasing on n1, n2's place held
    assert b.status is TaskStatus.RELEASING and b.node == 0
    cp = again.checkpoint()
    again.pipeline(b, 0)  # back where it runs: the eviction is undone, not a new move
    assert b.status is TaskStatus.PIPELINED and b.node == 1
    np.testing.assert_array_equal(nodes.idle, idle)
    np.testing.assert_array_equal(nodes.releasing, releasing)
    again.rollback(cp)  # rolling back past it evicts the pod again
    assert b.status is TaskStatus.RELEASING and b.node == 0
    again.discard()
    assert b.status is TaskStatus.PIPELINED and b.node == 1
    np.testing.assert_array_equal(nodes.idle, idle)
    np.testing.assert_array_equal(nodes.releasing, releasing)
    again = ssn.statement()
    again.evict(b, "move again")
    again.pipeline(b, 0)
    assert again.commit() == []  # nothing changed


def test_placing_again_a_pod_whose_placement_an_eviction_withdrew_is_marked(caplog):
    # KAI-Scheduler evicts the pod it has just bound (releasing for the rest of the
    # session); kai withdraws the bind, and a later placement is a marked difference.
    ssn = session([node("n1", gpus=2), node("n2", gpus=2), queue("q"), pod("a", gpus=1, queue="q")])
    a = ssn.jobs["default/a"].tasks[0]
    caplog.set_level(logging.DEBUG, logger="kai.framework.statement")

    def marks() -> list[str]:
        return [r.__dict__[DIFFERS] for r in caplog.records if DIFFERS in r.__dict__]

    first = ssn.statement()
    first.allocate(a, 0)
    first.commit()
    moving = ssn.statement()
    moving.evict(a, "move")
    moving.allocate(a, 1)  # placed again by the statement that evicts it: a move
    moving.commit()
    assert marks() == []
    evicting = ssn.statement()
    evicting.evict(a, "make room")
    assert a.status is TaskStatus.PENDING
    evicting.commit()
    assert marks() == []
    assert ssn.decisions == []  # the binds are withdrawn, nothing is evicted
    again = ssn.statement()
    again.allocate(a, 0)
    again.commit()
    assert marks() == ["withdrawn"]
    assert [(d.type, d.task.name, d.node) for d in ssn.decisions] == [("bind", "a", "n1")]


def test_release_holds_frees_moved_and_vacated_places():
    # A state that outlives a session (kai replay) frees the places held releasing before
    # the next one: a moved victim's old place and the place an undone placement left.
    ssn = session(
        [
            node("n1", gpus=2),
            node("n2", gpus=2),
            node("n3", gpus=2),
            queue("q"),
            pod("b", gpus=1, queue="q", node="n1"),
        ]
    )
    nodes = ssn.nodes
    b = ssn.jobs["default/b"].tasks[0]
    first = ssn.statement()
    first.evict(b, "move")
    first.pipeline(b, 1)  # n1 held for b
    first.commit()
    again = ssn.statement()
    again.evict(b, "move again")  # n2 vacated
    again.pipeline(b, 2)
    again.commit()
    assert nodes.held and nodes.vacated
    nodes.release_holds()
    assert not nodes.held and not nodes.vacated
    gpu = 2
    assert nodes.releasing[:, gpu].tolist() == [0.0, 0.0, -1.0]  # b pipelined on n3
    assert nodes.idle[:, gpu].tolist() == [2.0, 2.0, 2.0]


def test_order_functions_chain_and_first_decisive_wins():
    ssn = session([node("n1"), queue("q")])
    calls = []
    ssn._current = (0, "first")
    ssn.add_job_order_fn(lambda a, b: calls.append("first") or 0)
    ssn._current = (0, "second")
    ssn.add_job_order_fn(lambda a, b: calls.append("second") or -1)
    ssn._current = (0, "third")
    ssn.add_job_order_fn(lambda a, b: calls.append("third") or 1)
    assert ssn.job_order(object(), object()) == -1
    assert calls == ["first", "second"]


def test_victim_functions_intersect_within_a_tier_and_first_tier_decides():
    ssn = session([node("n1"), queue("q")])
    a, b, c = "a", "b", "c"
    ssn._current = (0, "p1")
    ssn.add_reclaimable_fn(lambda actor, cands: [a, b])
    ssn._current = (0, "p2")
    ssn.add_reclaimable_fn(lambda actor, cands: [b, c])
    ssn._current = (1, "p3")
    ssn.add_reclaimable_fn(lambda actor, cands: [c])
    assert ssn.reclaimable(None, [a, b, c]) == [b]
    # A tier whose plugins all abstain lets the next tier decide.
    ssn2 = session([node("n1"), queue("q")])
    ssn2._current = (0, "p1")
    ssn2.add_reclaimable_fn(lambda actor, cands: None)
    ssn2._current = (1, "p2")
    ssn2.add_reclaimable_fn(lambda actor, cands: [c])
    assert ssn2.reclaimable(None, [a, b, c]) == [c]


def test_node_scores_are_summed_and_predicates_all_must_pass():
    ssn = session([node("n1"), node("n2"), node("n3"), queue("q"), pod("p", gpus=1, queue="q")])
    job = ssn.jobs["default/p"]
    task = job.tasks[0]
    ssn.add_node_order_fn(lambda t, n: 5.0 if n.name == "n1" else 0.0)
    ssn.add_batch_node_order_fn(lambda t, j, m: np.array([0.0, 3.0, 3.0]))
    ssn.add_node_order_fn(lambda t, n: 3.0 if n.name == "n2" else 0.0)
    result = ssn.filter_nodes(task, job)
    assert ssn.best_node(task, job, result.mask) == 1  # n2: 6 > n1: 5
    ssn.add_predicate_fn(lambda t, j, n: "no" if n.name == "n2" else None)
    result = ssn.filter_nodes(task, job)
    assert list(result.mask) == [True, False, True]
    assert ssn.best_node(task, job, result.mask) == 0


class _Forbid(Plugin):
    name = "test-forbid-node"
    arguments = ("node",)

    def on_session_open(self, ssn):
        banned = self.args["node"]
        ssn.add_predicate_fn(lambda t, j, n: f"{n.name} is banned" if n.name == banned else None)


register_plugin("test-forbid-node", _Forbid)


def test_user_plugin_from_configuration_with_arguments():
    objs = [
        node("n1"),
        node("n2"),
        queue("q"),
        pod("busy", gpus=4, node="n1", queue="q"),
        pod("p", gpus=1, queue="q"),
    ]
    config = {
        "tiers": [
            {
                "plugins": [
                    {"name": "predicates"},
                    {"name": "proportion"},
                    {"name": "nodeplacement"},
                    {"name": "test-forbid-node", "arguments": {"node": "n1"}},
                ]
            }
        ]
    }
    out = run(objs, ["allocate"], config=config)
    assert statuses(out)["default/p"][1] == "n2"


def test_unknown_plugin_and_argument_are_clear_errors():
    with pytest.raises(kai.ConfigError, match="unknown plugin 'nope'"):
        run([node("n1")], [], config={"tiers": [{"plugins": [{"name": "nope"}]}]})
    with pytest.raises(kai.ConfigError, match="unknown argument"):
        run(
            [node("n1")],
            [],
            config={
                "tiers": [{"plugins": [{"name": "nodeplacement", "arguments": {"gpux": "spread"}}]}]
            },
        )
    with pytest.raises(kai.ConfigError, match="not one of"):
        run(
            [node("n1")],
            [],
            config={
                "tiers": [
                    {"plugins": [{"name": "nodeplacement", "arguments": {"gpu": "sideways"}}]}
                ]
            },
        )
    with pytest.raises(kai.ConfigError, match="unknown action"):
        run([node("n1")], ["allocate", "dance"])


def test_spot_instance_example_plugin():
    spot = {"kai.scheduler/instance-type": "spot"}
    objs = [
        node("spot", labels=spot),
        node("regular"),
        queue("q"),
        kai_priority := {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "inference"},
            "value": 125,
        },
        pod("serve", gpus=1, queue="q", priority_class="inference"),
        pod("train", gpus=1, queue="q"),
    ]
    assert kai_priority["value"] == 125
    config = {
        "tiers": [
            {
                "plugins": [
                    {"name": "predicates"},
                    {"name": "proportion"},
                    {"name": "spot-instance-manager"},
                ]
            }
        ]
    }
    out = run(objs, ["allocate"], config=config)
    assert statuses(out)["default/serve"][1] == "regular"  # non-preemptible: never spot
    assert statuses(out)["default/train"][1] == "regular"  # scored higher
    # Fill the regular node: the preemptible job may go to spot, the other may not.
    objs.append(pod("hog", gpus=7, queue="q", node="regular"))
    out = run(objs, ["allocate"], config=config)
    s = statuses(out)
    assert "Binding" in (s["default/serve"][0], s["default/train"][0])
    assert s["default/train"][1] in ("spot", "regular")
    if s["default/serve"][0] == "Pending":
        assert s["default/train"][1] == "spot" or s["default/train"][0] == "Binding"


def test_namespace_allocation_tracker_example_plugin():
    snap = kai.Snapshot.from_objects(
        [
            node("n1"),
            queue("q"),
            pod("a", "ns1", gpus=1, queue="q"),
            pod("b", "ns2", gpus=1, queue="q"),
            pod("c", "ns1", gpus=1, queue="q"),
        ]
    )
    config = SchedulerConfig.from_object(None, actions=["allocate"])
    config.tiers = [
        [
            kai.api.objects.PluginOption(n)
            for n in ("predicates", "proportion", "namespace-allocation-tracker")
        ]
    ]
    ssn = Session(snap.state(), config, now=NOW)
    ssn.open(config.build_plugins())
    from kai.actions import get_action, register_builtins

    register_builtins()
    get_action("allocate")(ssn)
    assert dict(ssn.cache["namespace-allocation-tracker"]) == {"ns1": 2, "ns2": 1}


def test_a_session_frees_its_state_without_the_cyclic_collector():
    """Tasks, jobs and plugins are gone when run_session returns, not left for a GC pass."""
    import gc

    from kai.api.model import Job, Task
    from kai.bench_clusters import kai_topology

    snap = kai.Snapshot(kai_topology(10, "mixed").objects())
    kai.run_session(snap, now=NOW)  # imports and caches warmed
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        result = kai.run_session(snap, now=NOW)
        gc.collect()
        leftovers = [o for o in gc.garbage if isinstance(o, (Task, Job))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()
    assert result.decisions and len(result.pods) == 50
    assert leftovers == []


def test_a_job_takes_its_pod_groups_times_and_a_view_keeps_every_field():
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    group = PodGroupObject(
        "pg", "ns", last_start_timestamp=start, staleness_grace_period=60.0, preemption_delay=5.0
    )
    job = Job("pg", "pg", "ns", "q", 50, 2, True, "preemptible", None, None, group)
    assert (job.last_start_timestamp, job.staleness_grace_period, job.preemption_delay) == (
        start,
        60.0,
        5.0,
    )
    assert job.tasks == [] and job.warnings == [] and job.fit_errors == []
    job.fit_errors.append("no room")
    job.stale_since_set = start
    view = job.with_tasks([])
    for f in dataclasses.fields(Job):
        if f.name != "tasks":
            assert getattr(view, f.name) is getattr(job, f.name), f.name
    assert view.tasks == [] and view.tasks is not job.tasks
    bare = Job("j", "j", "ns", None, 50, 1, True, "preemptible", None)
    assert bare.pod_group is None and bare.last_start_timestamp is None


def test_a_job_queue_pops_alike_jobs_as_pop_would() -> None:
    # pop_alike gives the job pop() would give next when nothing changed, or None.
    from kai.actions.common import JobQueue, schedulable_jobs
    from kai.bench_clusters import cluster_fill, random_cluster

    hits = 0
    builders = [random_cluster(seed, nodes=8, jobs=60) for seed in range(12)]
    builders.append(cluster_fill(10, pods=120, gang_fraction=0.2))  # alike single pods
    for seed, builder in enumerate(builders):
        snap = kai.Snapshot.from_objects(builder.dicts())
        config = SchedulerConfig.default()
        ssn = Session(snap.state(), config, now=NOW)
        ssn.open(config.build_plugins())
        jobs = schedulable_jobs(ssn)
        plain = JobQueue(ssn, jobs, reuse_comparisons=True)
        expected = []
        while (job := plain.pop()) is not None:
            expected.append(job)
        alike = JobQueue(ssn, jobs, reuse_comparisons=True)
        got: list[Job] = []
        last: Job | None = None
        while True:
            job = alike.pop_alike(last) if last is not None else None
            hits += job is not None
            job = job or alike.pop()
            if job is None:
                break
            got.append(job)
            last = job
        assert got == expected, seed
        ssn.close()
    assert hits > 50


def test_a_job_queue_built_at_once_pops_as_one_pushed_job_by_job() -> None:
    """A queue made from a list sorts each leaf on the job order's keys; it pops the
    jobs in the order that pushing them one by one gives, in victim mode too and with a
    depth limit (which keeps a leaf's first jobs).  Two jobs of a leaf with equal keys
    are pushed one by one."""
    import random

    from kai.actions.common import JobQueue
    from kai.bench_clusters import random_cluster

    def drain(queue: JobQueue) -> list[Job]:
        out = []
        while (job := queue.pop()) is not None:
            out.append(job)
        return out

    rng = random.Random(5)
    for seed in range(8):
        snap = kai.Snapshot.from_objects(random_cluster(seed, nodes=6, jobs=50).dicts())
        config = SchedulerConfig.default()
        ssn = Session(snap.state(), config, now=NOW)
        ssn.open(config.build_plugins())
        jobs = list(ssn.jobs.values())
        rng.shuffle(jobs)
        if seed % 2:  # two jobs of one leaf that no key tells apart
            twin = next(j for j in jobs[1:] if j.queue == jobs[0].queue)
            twin.uid, twin.creation_timestamp = jobs[0].uid, jobs[0].creation_timestamp
            twin.priority = jobs[0].priority
        for victim_mode in (False, True):
            for depth in (None, 3):
                pushed = JobQueue(ssn, [], victim_mode=victim_mode, max_depth=depth)
                for job in jobs:
                    pushed.push(job)
                made = JobQueue(ssn, jobs, victim_mode=victim_mode, max_depth=depth)
                assert drain(made) == drain(pushed), (seed, victim_mode, depth)
        ssn.close()


def test_task_order_keys_sort_as_the_comparisons_do() -> None:
    """The session sorts a job's pods by the ordering plugins' keys, once per session; a
    view of the job takes its job's order.  Both match sorting by the chained task-order
    comparisons, ties and missing labels included; a task order without a key falls
    back to the comparisons."""
    import functools
    import random

    from kai.framework.session import tasks_to_allocate
    from kai.plugins.ordering import KUBEFLOW_ROLE_LABEL, TASK_PRIORITY_LABEL
    from tests.factory import podgroup

    rng = random.Random(7)
    objs = [node("n1"), queue("q")]
    for g in range(6):
        objs.append(podgroup(f"g{g}", min_member=rng.randint(1, 4)))
        for i in range(rng.randint(2, 9)):
            labels = {}
            if rng.random() < 0.5:
                labels[TASK_PRIORITY_LABEL] = str(rng.randint(0, 3))
            if rng.random() < 0.3:
                labels[KUBEFLOW_ROLE_LABEL] = rng.choice(["master", "worker"])
            minute = rng.randint(0, 3)  # ties on creation time, broken by uid
            objs.append(
                pod(
                    f"g{g}-{rng.randint(0, 999)}-{i}",
                    group=f"g{g}",
                    queue="q",
                    labels=labels,
                    created=f"2026-11-22T10:0{minute}:00Z",
                )
            )
    ssn = session(objs, plugins=("priority", "taskorder", "kubeflow", "proportion"))
    assert ssn.task_order_key() is not None
    by_comparisons = functools.cmp_to_key(ssn.task_order)
    for job in ssn.jobs.values():
        expected = sorted(job.tasks, key=by_comparisons)
        assert ssn.ordered_tasks(job) == expected
        assert ssn.ordered_tasks(job) is ssn.ordered_tasks(job)  # made once
        part = rng.sample(job.tasks, len(job.tasks) // 2)
        view = job.with_tasks(part)
        assert ssn.ordered_tasks(view) == sorted(part, key=by_comparisons)
        if part:  # all pending: the gang up to its minimum comes first
            chunk = sorted(part, key=by_comparisons)[: max(job.min_member, 1)]
            assert tasks_to_allocate(ssn, view) == chunk

    # A task order with no key: the comparisons alone decide.
    ssn._current = (0, "custom")
    ssn.add_task_order_fn(lambda a, b: -1 if a.name > b.name else (1 if a.name < b.name else 0))
    assert ssn.task_order_key() is None and ssn.ordered_tasks(job) is None
    tasks = list(job.tasks)
    assert ssn.sorted_tasks(tasks) == sorted(tasks, key=functools.cmp_to_key(ssn.task_order))


def test_a_victim_queue_reusing_comparisons_pops_as_one_that_does_not() -> None:
    """Victim mode reuses a queue comparison while both sides' victims and queues are
    unchanged: the pops are those of a queue that compares every time, also across
    re-pushed partial jobs, evictions undone between pops, and evictions kept (the
    queue versions change: the comparisons are made again)."""
    import random

    from kai.actions.common import JobQueue
    from kai.actions.solvers.batches import job_view
    from kai.bench_clusters import random_cluster
    from kai.framework.statement import Statement
    from tests.factory import counted_queue_comparisons

    saved = 0
    for seed in range(12):
        builder = random_cluster(seed, nodes=8, jobs=60)

        def drain(reuse: bool, seed: int = seed, builder=builder) -> tuple[list, int]:
            rng = random.Random(seed)
            snap = kai.Snapshot.from_objects(builder.dicts())
            config = SchedulerConfig.default()
            ssn = Session(snap.state(), config, now=NOW)
            ssn.open(config.build_plugins())
            running = [j for j in ssn.jobs.values() if any(t.node >= 0 for t in j.tasks)]
            placed = [t for j in running for t in j.tasks if t.node >= 0]
            queue = JobQueue(ssn, [job_view(j, j.tasks) for j in running], victim_mode=True)
            assert queue._memo is not None
            if not reuse:
                queue._memo = None
            with counted_queue_comparisons(ssn) as calls:
                popped = []
                while (view := queue.pop()) is not None:
                    popped.append((view.key, tuple(t.uid for t in view.tasks)))
                    draw = rng.random()
                    if draw < 0.3 and len(view.tasks) > 1:
                        queue.push(job_view(view, view.tasks[1:]))
                    if draw > 0.6 and placed:
                        # the pods of one queue evicted: its allocation shrinks
                        leaf = placed[rng.randrange(len(placed))].job.queue
                        stmt = Statement(ssn)
                        for task in [t for t in placed if t.job.queue == leaf][:4]:
                            placed.remove(task)
                            stmt.evict(task, "test")
                        if draw > 0.8:
                            stmt.commit()
                        else:
                            stmt.discard()  # a simulation's evictions, undone
            ssn.close()
            return popped, calls[0]

        reused, fewer = drain(True)
        compared, every = drain(False)
        assert reused == compared, seed
        saved += every - fewer
    assert saved > 0


def test_a_victim_queue_compares_again_after_a_queue_changes() -> None:
    """One running pod in each of three queues: after the first pop, an eviction kept
    in queue b changes how a and b compare, and the victim queue sees it (a comparison
    kept from before the eviction would put b first)."""
    from kai.actions.common import JobQueue
    from kai.actions.solvers.batches import job_view
    from kai.framework.statement import Statement
    from tests.factory import pod

    def pops(reuse: bool) -> list[str]:
        objs = [node("n1", gpus=16), node("n2", gpus=16), queue("root")]
        for q in "abc":
            objs.append(queue(q, parent="root", gpu=(0, -1, 1)))
            objs.append(pod(f"{q}0", gpus=1, queue=q, node="n2"))
        config = SchedulerConfig.default()
        ssn = Session(kai.Snapshot.from_objects(objs).state(), config, now=NOW)
        ssn.open(config.build_plugins())
        jobs = sorted(ssn.jobs.values(), key=lambda j: j.key)
        victims = JobQueue(ssn, [job_view(j, j.tasks) for j in jobs], victim_mode=True)
        if not reuse:
            victims._memo = None
        order = [victims.pop().key]
        stmt = Statement(ssn)
        stmt.evict(ssn.jobs["default/b0"].tasks[0], "test")
        stmt.commit()
        while (view := victims.pop()) is not None:
            order.append(view.key)
        ssn.close()
        return order

    assert pops(True) == pops(False) == ["default/c0", "default/a0", "default/b0"]


def test_every_node_with_a_shared_device_is_among_the_shared_nodes() -> None:
    # Walks over the shared devices (the victim search's GPU capacity) read only the
    # node table's shared nodes: allocating, evicting and restoring fractional pods must
    # keep every node that holds a device among them.
    from kai.actions import get_action, register_builtins
    from kai.bench import SCENARIOS
    from kai.bench_clusters import NOW as BENCH_NOW

    register_builtins()
    scenario = SCENARIOS["fractional"]
    snap = kai.Snapshot(scenario.build(scenario.sizes["small"]).objects())
    config = SchedulerConfig.default()
    ssn = Session(snap.state(), config, now=BENCH_NOW)
    ssn.open(config.build_plugins())
    seen = 0
    for action in ("allocate", "consolidation", "reclaim", "preempt"):
        ssn.current_action = action
        get_action(action)(ssn)
        holding = {i for i, groups in enumerate(ssn.nodes.gpu_groups) if groups}
        assert holding <= ssn.nodes.shared_nodes, action
        seen = max(seen, len(holding))
    assert seen > 0  # the scenario does share devices
    ssn.close()
