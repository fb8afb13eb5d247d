"""``kai bench``: scheduling benchmarks on generated clusters.

Each scenario builds a cluster (:mod:`kai.bench_clusters`), times the snapshot (making
the Kubernetes manifests and parsing them) apart from the session (building the
session state, opening the plugins and running the actions: what one scheduling cycle
costs), and measures memory in a separate, traced run:

* ``peak MiB``: tracemalloc peak during one ``run_session`` (Python objects and numpy
  buffers; numpy reports its allocations to tracemalloc), above what was allocated
  before it started; the process's peak RSS (``resource.getrusage``) is in the JSON;
* ``bytes/pod`` and ``bytes/node``: tracemalloc size of the session state
  (``Snapshot.state()``: tasks, jobs, queues, node matrices), the node part measured
  on the same cluster without pods.

Times are medians over ``--repeat`` sessions after one warm-up session (which also
compiles numba kernels; its time is reported as ``warmup_s``).  Before each timed
session the previous session's result is dropped, so a timing holds one session's
work, not the harness freeing the result it kept from the one before.
"""

from __future__ import annotations

import gc
import json
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Mapping
from dataclasses import asdict, field
from typing import TYPE_CHECKING, Any

from kai import bench_clusters as gen
from kai._dataclasses import dataclass

if TYPE_CHECKING:
    from kai.output import Progress

SIZES = ("small", "medium", "large")


@dataclass
class Scenario:
    name: str
    description: str
    build: Callable[[str | int], gen.ClusterBuilder]
    actions: list[str] | None  # None: the default actions (full cycle)
    sizes: Mapping[str, str | int]  # small/medium/large -> the size argument given to build
    requires: tuple[str, ...] = ()  # actions that must be registered
    plugins: tuple[str, ...] = ()  # plugins that must be registered (added to the config)
    partial_ok: bool = False  # run with the registered subset of ``requires``

    @property
    def kai_harness(self) -> bool:
        """A topology of KAI-Scheduler's own benchmarks, which run through its test
        harness: that harness lifts the limit on consolidation victims, so kai does too."""
        return self.name.startswith("kai-")


def _kai(mode: str, **kw: Any) -> Callable[[str | int], gen.ClusterBuilder]:
    return lambda size: gen.kai_topology(size, mode, **kw)


_KAI3 = {"small": "small", "medium": "medium", "large": "large"}
_FULL = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "kai-allocate",
            "KAI benchmark_test.go AllocateAction: all jobs pending",
            _kai("pending"),
            ["allocate"],
            _KAI3,
            ("allocate",),
        ),
        Scenario(
            "kai-reclaim",
            "KAI ReclaimAction: all jobs running, job i on node-(i % nodes)",
            _kai("running"),
            ["reclaim"],
            _KAI3,
            ("reclaim",),
        ),
        Scenario(
            "kai-preempt",
            "KAI PreemptAction: even jobs running, odd pending",
            _kai("mixed"),
            ["preempt"],
            _KAI3,
            ("preempt",),
        ),
        Scenario(
            "kai-consolidation",
            "KAI ConsolidationAction: mixed",
            _kai("mixed"),
            ["consolidation"],
            _KAI3,
            ("consolidation",),
        ),
        Scenario(
            "kai-full-cycle",
            "KAI FullSchedulingCycle: mixed, all five actions in the default order",
            _kai("mixed"),
            None,
            _KAI3,
            _FULL,
            partial_ok=True,
        ),
        Scenario(
            "kai-many-queues",
            "KAI ManyQueues: 20 queues in 5 departments, all pending",
            _kai("pending", queues=20),
            ["allocate"],
            _KAI3,
            ("allocate",),
        ),
        Scenario(
            "kai-gang",
            "KAI GangScheduling: gangs of 4 single-GPU pods",
            _kai("pending", gang=4),
            ["allocate"],
            _KAI3,
            ("allocate",),
        ),
        Scenario(
            "kai-reclaim-large-jobs",
            "KAI BenchmarkReclaimLargeJobs_<N>Node: one N/2 x 8-GPU job evicts N/2*8 pods",
            lambda n: gen.kai_reclaim_large_jobs(int(n)),
            ["allocate", "reclaim"],
            {"small": 100, "medium": 500, "large": 1000},
            ("reclaim",),
        ),
        Scenario(
            "kai-reclaim-many-single",
            "KAI BenchmarkReclaimManySingleGPUJobsFullCycle_<N>Node",
            lambda n: gen.kai_reclaim_many_single_gpu(int(n)),
            None,
            {"small": 50, "medium": 200, "large": 500},
            _FULL,
            partial_ok=True,
        ),
        Scenario(
            "fill",
            "cluster fill: N x 8-GPU nodes, single-GPU jobs and 8-64 pod gangs, 3-level queues",
            lambda n: gen.cluster_fill(int(n)),
            ["allocate"],
            {"small": 100, "medium": 1000, "large": 10000},
            ("allocate",),
        ),
        Scenario(
            "fill-100k",
            "100,000 pending single-GPU pods onto 10,000 x 8-GPU nodes (N/10 x 100 pods)",
            lambda n: gen.cluster_fill(int(n), pods=int(n) * 10, gang_fraction=0.0),
            ["allocate"],
            {"small": 100, "medium": 1000, "large": 10000},
            ("allocate",),
        ),
        Scenario(
            "reclaim-storm",
            "full cluster of N nodes, 1,000 pending jobs of an under-quota queue must reclaim",
            lambda n: gen.storm(int(n), 1000, kind="reclaim"),
            ["allocate", "reclaim"],
            {"small": 100, "medium": 1000, "large": 5000},
            ("reclaim",),
        ),
        Scenario(
            "preempt-storm",
            "full cluster of N nodes, 1,000 high-priority pending jobs must preempt",
            lambda n: gen.storm(int(n), 1000, kind="preempt"),
            ["allocate", "preempt"],
            {"small": 100, "medium": 1000, "large": 5000},
            ("preempt",),
        ),
        Scenario(
            "loadaware",
            "load-aware scoring of N nodes (the loadaware plugin added to the default tier)",
            lambda n: gen.cluster_fill(int(n), pods=int(n), gang_fraction=0.0),
            ["allocate"],
            {"small": 100, "medium": 1000, "large": 10000},
            ("allocate",),
            plugins=("loadaware",),
        ),
        Scenario(
            "fractional",
            "fractional GPU packing: 0.1-0.5 GPU pods, 2 per device",
            lambda n: gen.fractional(int(n)),
            ["allocate"],
            {"small": 20, "medium": 100, "large": 1000},
            ("allocate",),
        ),
    )
}


@dataclass
class BenchResult:
    scenario: str
    size: str
    nodes: int
    pods: int
    pending_pods: int
    backend: str
    actions: list[str]
    snapshot_s: float = 0.0
    state_s: float = 0.0
    session_s: float = 0.0
    session_runs: list[float] = field(default_factory=list)
    warmup_s: float = 0.0
    action_s: dict[str, float] = field(default_factory=dict)
    placed: int = 0
    evicted: int = 0
    pods_per_s: float = 0.0
    peak_mib: float = 0.0
    max_rss_mib: float = 0.0
    state_bytes: int = 0
    bytes_per_pod: float = 0.0
    bytes_per_node: float = 0.0
    skipped: str | None = None
    note: str | None = None


def registered_actions() -> set[str]:
    from kai.actions import action_names, register_builtins

    register_builtins()
    return set(action_names())


def scenario_config(scenario: Scenario):
    """The configuration a scenario runs with (None: the defaults), built and checked
    once: every timed session then starts from it, as a live scheduler's do."""
    from kai.api.objects import PluginOption, SchedulerConfigObject
    from kai.config import DEFAULT_PLUGINS, SchedulerConfig
    from kai.framework.plugin import plugin_names
    from kai.plugins import register_builtins

    if not scenario.plugins and not scenario.kai_harness:
        return None
    config = SchedulerConfigObject()
    if scenario.plugins:
        register_builtins()
        known = set(plugin_names())
        config.tiers = [
            [p for p in DEFAULT_PLUGINS if p.name in known]
            + [PluginOption(p) for p in scenario.plugins]
        ]
    if scenario.kai_harness:
        config.max_consolidation_preemptees = -1
    return SchedulerConfig.from_object(config)


def _size_arg(scenario: Scenario, size: str) -> str | int:
    if size in scenario.sizes:
        return scenario.sizes[size]
    try:
        return int(size)
    except ValueError:
        raise ValueError(f"size must be small, medium, large or a number, got {size!r}") from None


def run_scenario(
    scenario: Scenario,
    size: str = "small",
    *,
    backend: str | None = None,
    repeat: int = 3,
    memory: bool = True,
    input_form: str = "dicts",
    step: Callable[[str], None] | None = None,
) -> BenchResult:
    """Build the scenario's cluster, run it ``repeat`` times (after a warm-up) and measure.

    ``step`` is told the name of each step as it starts (:func:`scenario_steps` of them).
    """
    from kai.backends import get_backend
    from kai.engine import Snapshot, run_session
    from kai.framework.plugin import plugin_names
    from kai.plugins import register_builtins

    register_builtins()
    be = get_backend(backend).name
    have = registered_actions()
    missing = [a for a in scenario.requires if a not in have]
    actions = scenario.actions
    note = None
    if scenario.actions is None:
        actions = [a for a in _FULL if a in have]
    result = BenchResult(scenario.name, str(size), 0, 0, 0, be, list(actions or []))
    if missing and not scenario.partial_ok:
        result.skipped = f"action(s) not registered yet: {', '.join(missing)}"
        return result
    if missing:
        note = f"without {', '.join(missing)} (not registered)"
    missing_plugins = [p for p in scenario.plugins if p not in plugin_names()]
    if missing_plugins:
        result.skipped = f"plugin(s) not registered yet: {', '.join(missing_plugins)}"
        return result
    config = scenario_config(scenario)

    arg = _size_arg(scenario, size)
    if step is None:

        def step(_name: str) -> None:
            pass

    step("building the cluster")
    t0 = time.perf_counter()
    builder = scenario.build(arg)
    if input_form == "dicts":
        snap = Snapshot.from_objects(builder.dicts())
    else:
        snap = Snapshot(builder.objects())
    result.snapshot_s = time.perf_counter() - t0
    result.nodes = len(builder.nodes)
    result.pods = builder.pod_count
    result.pending_pods = builder.pending_pod_count
    result.note = note

    def session():
        return run_session(snap, config=config, actions=actions, now=gen.NOW, backend=be)

    step("warm-up session")
    t0 = time.perf_counter()
    res = session()
    result.warmup_s = time.perf_counter() - t0
    runs = []
    gc.collect()
    for i in range(max(repeat, 1)):
        step(f"session {i + 1}/{max(repeat, 1)}")
        # Each timed session starts as a scheduler's next cycle does: with the
        # previous result dropped (a forced collection here would only evict caches).
        res = None
        t0 = time.perf_counter()
        res = session()
        runs.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    snap.state()
    result.state_s = time.perf_counter() - t0
    result.session_runs = runs
    result.session_s = statistics.median(runs)
    result.action_s = dict(res.action_seconds)
    result.placed = sum(1 for d in res.decisions if d.type in ("bind", "pipeline"))
    result.evicted = sum(1 for d in res.decisions if d.type == "evict")
    result.pods_per_s = result.placed / result.session_s if result.session_s > 0 else 0.0
    del res
    if memory:
        step("memory")
        _measure_memory(result, builder, snap, session, input_form)
    result.max_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return result


def _traced(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """(value, bytes still allocated after, peak bytes) of ``fn`` under tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        value = fn()
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return value, current - base, peak - base


def _measure_memory(result: BenchResult, builder, snap, session, input_form: str) -> None:
    from kai.engine import Snapshot

    _, _, peak = _traced(session)
    result.peak_mib = peak / 2**20
    state, size, _ = _traced(snap.state)
    del state
    jobs, builder.jobs = builder.jobs, []
    try:
        empty = Snapshot(builder.objects())
    finally:
        builder.jobs = jobs
    state, node_bytes, _ = _traced(empty.state)
    del state
    result.state_bytes = size
    result.bytes_per_node = node_bytes / max(result.nodes, 1)
    result.bytes_per_pod = (size - node_bytes) / max(result.pods, 1)


# ---------------------------------------------------------------------- output
COLUMNS = (
    ("scenario", "{}"),
    ("size", "{}"),
    ("nodes", "{:,}"),
    ("pods", "{:,}"),
    ("snapshot s", "{:.3f}"),
    ("session s", "{:.4f}"),
    ("pods placed/s", "{:,.0f}"),
    ("peak MiB", "{:.1f}"),
    ("bytes/pod", "{:,.0f}"),
)


def _row(r: BenchResult) -> list[str]:
    if r.skipped:
        return [r.scenario, r.size, "-", "-", "-", "-", "-", "-", "-"]
    values = (
        r.scenario,
        r.size,
        r.nodes,
        r.pods,
        r.snapshot_s,
        r.session_s,
        r.pods_per_s,
        r.peak_mib,
        r.bytes_per_pod,
    )
    cells = [fmt.format(v) for (_, fmt), v in zip(COLUMNS, values)]
    if not r.state_bytes:  # memory not measured (--no-memory)
        cells[-2:] = ["-", "-"]
    return cells


def render_table(results: list[BenchResult]) -> str:
    header = [c for c, _ in COLUMNS]
    rows = [_row(r) for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    lines = [
        "  ".join(
            h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))
        )
    ]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append(
            "  ".join(
                v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))
            )
        )
    notes = []
    for r in results:
        if r.skipped:
            notes.append(f"{r.scenario} ({r.size}): skipped, {r.skipped}")
        elif r.note:
            notes.append(f"{r.scenario} ({r.size}): {r.note}")
    backends = sorted({r.backend for r in results})
    lines.append("")
    lines.append(
        f"backend: {', '.join(backends)}; session s = median of the timed sessions "
        "(state build + plugins + actions); peak MiB = tracemalloc peak of one session"
    )
    lines.extend(notes)
    return "\n".join(lines)


def results_json(results: list[BenchResult]) -> dict[str, Any]:
    import platform

    return {
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
        },
        "memory_method": "tracemalloc (peak of one session; state size), getrusage max RSS",
        "results": [asdict(r) for r in results],
    }


def run_bench(
    scenarios: list[str],
    size: str = "small",
    *,
    backend: str | None = None,
    repeat: int = 3,
    memory: bool = True,
    input_form: str = "dicts",
    progress: Progress | None = None,
) -> list[BenchResult]:
    """Run the scenarios in turn; ``progress`` shows one bar for them, one for the current."""
    from kai.output import Progress

    names = list(SCENARIOS) if not scenarios or "all" in scenarios else scenarios
    for name in names:
        if name not in SCENARIOS:
            raise ValueError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
    out = []
    with progress or Progress(enabled=False) as shown:
        overall = shown.bar("kai bench", total=len(names))
        for name in names:
            overall.phase(f"{name} ({size})")
            steps = shown.bar(name, total=scenario_steps(repeat, memory))
            out.append(
                run_scenario(
                    SCENARIOS[name],
                    size,
                    backend=backend,
                    repeat=repeat,
                    memory=memory,
                    input_form=input_form,
                    step=steps.phase,
                )
            )
            steps.finish()
        overall.advance()
    return out


def scenario_steps(repeat: int, memory: bool) -> int:
    """The steps of one scenario: build, warm-up, the timed sessions, memory."""
    return 2 + max(repeat, 1) + (1 if memory else 0)


def write_json(path: str, results: list[BenchResult]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(results_json(results), fh, indent=2)
        fh.write("\n")
