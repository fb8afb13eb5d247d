"""The ``kai`` command line."""

from __future__ import annotations

import os
import sys

import click

from kai.api.errors import InputError


def _fail_input(err: InputError) -> None:
    click.echo(f"kai: error: {err}", err=True)
    sys.exit(2)


# Exit status of a command whose reader went away (``kai simulate ... | head``): what a
# shell reports for cat, grep or git killed by SIGPIPE, 128 + SIGPIPE.  Python ignores
# SIGPIPE and raises BrokenPipeError instead, so the CLI exits like those tools: quietly
# and with their status.
EXIT_BROKEN_PIPE = 141


def _exit_on_broken_pipe() -> None:
    # Point stdout at /dev/null so that the interpreter's final flush of what is still
    # buffered does not fail again and print "Exception ignored ... BrokenPipeError".
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (embedded use)
        pass
    finally:
        os.close(devnull)
    sys.exit(EXIT_BROKEN_PIPE)


# A `kai` process started from the console (entry) ends a finished simulation without
# freeing its snapshot and result object by object: the operating system takes the
# memory back at once.  Programs that call main (click's test runner, embedders) return
# from it as usual.
_exit_when_done = False


def _exit_now() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _exit_on_broken_pipe()
    sys.stderr.flush()
    os._exit(0)


def _write_stdout(data: bytes) -> None:
    """Write ASCII bytes to stdout, past its text layer where it has one (a large
    result is not decoded only to be encoded again)."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(data.decode("ascii"))
        return
    sys.stdout.flush()
    # Unbuffered (python -u), stdout's buffer is the raw file, which may write a part.
    view = memoryview(data)
    while view:
        view = view[buffer.write(view) or 0 :]


class _Group(click.Group):
    """Maps user errors to exit code 2 and anything unexpected to 1, without tracebacks.

    A closed stdout (the reader of a pipe exited) ends the command quietly with status
    141, as cat or grep do.
    """

    def invoke(self, ctx: click.Context):
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a reader that went away fails here, not at exit
            return result
        except InputError as err:
            _fail_input(err)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except BrokenPipeError:
            _exit_on_broken_pipe()
        except KeyboardInterrupt:
            sys.exit(130)
        except Exception as err:  # noqa: BLE001 - last-resort handler of the CLI
            if os.environ.get("KAI_DEBUG"):
                raise
            click.echo(f"kai: internal error: {type(err).__name__}: {err}", err=True)
            click.echo("kai: set KAI_DEBUG=1 for a traceback", err=True)
            sys.exit(1)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        import kai

        click.echo(f"kai, version {kai.__version__}")
        ctx.exit()


@click.group(cls=_Group)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def main() -> None:
    """kai: a batch and GPU scheduling engine for Kubernetes."""
    from kai.memory import retain_memory

    retain_memory()  # sessions reuse the memory the previous one freed


def _check_backend(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    # A backend that cannot load (numba not installed) is a usage error, said before any work.
    from kai.backends import ENV_VAR, BackendUnavailableError, get_backend

    if value is not None or os.environ.get(ENV_VAR, "").strip():
        try:
            get_backend(value)
        except (BackendUnavailableError, ValueError) as err:  # ValueError: unknown $KAI_BACKEND
            raise InputError(str(err), obj="--backend" if value else f"${ENV_VAR}") from None
    return value


_backend_option = click.option(
    "--backend",
    type=click.Choice(["native", "numba", "python"]),
    callback=_check_backend,
    help="Compute backend (default: $KAI_BACKEND, else native when built, else numba when "
    "installed, else python).",
)


def _split_actions(value: str | None) -> list[str] | None:
    if value is None:
        return None
    actions = [a.strip() for a in value.split(",") if a.strip()]
    if not actions:
        raise InputError("no action named", obj="--actions")
    from kai.config import check_action_names

    check_action_names(actions, obj="--actions", field=None)
    return actions


@main.command()
@click.argument("snapshot", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="SchedulerConfiguration file (overrides one inside the snapshot).",
)
@click.option("--actions", help="Comma-separated actions to run, in order (e.g. allocate,reclaim).")
@click.option("--now", help="RFC 3339 time used as 'now' (min-runtime, metric expiry).")
@click.option(
    "--output", "output", type=click.Choice(["json", "table"]), default="json", show_default=True
)
@click.option("--explain", is_flag=True, help="Say why each pending group was not scheduled.")
@click.option(
    "--node-pool",
    help="Schedule only this node pool (value of the kai.scheduler/node-pool label; "
    "'' for objects without it). Default: every pool, one session each.",
)
@click.option(
    "--queue-usage",
    "usage_file",
    type=click.Path(dir_okay=False),
    help="JSON/YAML file of queues' historical usage for time-based fair share "
    "({queue: {gpu|cpu|memory: usage / capacity over the window}}).",
)
@_backend_option
def simulate(
    snapshot, config_file, actions, now, output, explain, node_pool, usage_file, backend
) -> None:
    """Run one scheduling session on SNAPSHOT file(s) and print the decisions."""
    from kai.engine import Snapshot, run_session
    from kai.fairshare import load_usage_file
    from kai.memory import gc_paused
    from kai.output import SimulateProgress

    # A large simulation shows its phases on a terminal's stderr; the display is gone
    # before anything is written to stdout.  Loading, scheduling and writing the result
    # make many objects and no garbage cycles: the collector is paused throughout, and
    # a process that ends right after writing never runs it (resumed, its first pass
    # would walk every object the simulation made).
    with gc_paused():
        with SimulateProgress(snapshot) as phases:
            phases.phase("loading")
            snap = Snapshot.from_files(list(snapshot))
            phases.loaded(len(snap.objects.pods))
            config = snap.config
            if config_file:
                from kai.snapshot.loader import load_config_file

                config = load_config_file(config_file)
            now_value = None
            if now is not None:
                from kai.api.quantity import parse_time

                try:
                    now_value = parse_time(now)
                except ValueError as err:
                    raise InputError(str(err), obj="--now") from None
            phases.phase("scheduling")
            result = run_session(
                snap,
                config=config,
                actions=_split_actions(actions),
                now=now_value,
                backend=backend,
                node_pool=node_pool,
                queue_usage=load_usage_file(usage_file) if usage_file else None,
            )
            phases.phase("output")
            if output == "json":
                from kai.output import json_bytes

                data = json_bytes(result.to_json(explain=explain)) + b"\n"
            else:
                from kai.output import render_table

                text = render_table(result, explain=explain)
        for message in result.warnings:
            click.echo(f"kai: warning: {message}", err=True)
        if output == "json":
            _write_stdout(data)
        else:
            click.echo(text)
        if _exit_when_done:
            _exit_now()


@main.command()
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    default=("all",),
    show_default=True,
    help="Scenario to run (repeatable); 'all' runs every scenario. See --list.",
)
@click.option(
    "--size",
    default="small",
    show_default=True,
    help="small, medium, large, or a number (nodes; KAI topologies: 5 jobs per node).",
)
@_backend_option
@click.option("--repeat", default=3, show_default=True, type=click.IntRange(1), help="Timed runs.")
@click.option("--json", "json_file", type=click.Path(dir_okay=False), help="Also write JSON here.")
@click.option("--no-memory", is_flag=True, help="Skip the (slower) traced memory runs.")
@click.option(
    "--input",
    "input_form",
    type=click.Choice(["dicts", "objects"]),
    default="dicts",
    show_default=True,
    help="Snapshot from Kubernetes manifests (dicts, parsed) or parsed objects directly.",
)
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and exit.")
def bench(scenarios, size, backend, repeat, json_file, no_memory, input_form, list_only) -> None:
    """Benchmark scheduling sessions on generated clusters and print a table."""
    from kai import bench as b
    from kai.output import Progress

    if list_only:
        for name, sc in b.SCENARIOS.items():
            sizes = ", ".join(f"{k}={v}" for k, v in sc.sizes.items())
            click.echo(f"{name:26} {sc.description} [{sizes}]")
        return
    unknown = [s for s in scenarios if s != "all" and s not in b.SCENARIOS]
    if unknown:
        raise InputError(
            f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(b.SCENARIOS)}",
            obj="--scenario",
        )
    if size not in b.SIZES:
        try:
            int(size)
        except ValueError:
            raise InputError(
                f"size must be small, medium, large or a number, got {size!r}", obj="--size"
            ) from None
    results = b.run_bench(
        list(scenarios),
        size,
        backend=backend,
        repeat=repeat,
        memory=not no_memory,
        input_form=input_form,
        progress=Progress(),  # bars on a terminal's stderr, nothing in CI or a pipe
    )
    click.echo(b.render_table(results))
    if json_file:
        b.write_json(json_file, results)


@main.command()
@click.argument("cluster", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--trace",
    "trace",
    required=True,
    help="Workload: a CSV or Parquet trace, Alibaba's pai_job_table.csv, or "
    "'synthetic[:jobs=N,span=DURATION,load=F]'.",
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="SchedulerConfiguration file (overrides one among the cluster files).",
)
@click.option("--period", default="10s", show_default=True, help="Scheduling period.")
@click.option("--until", help="Stop at this simulated time (default: when all jobs are done).")
@click.option("--html", is_flag=True, help="Also write report.html with interactive charts.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of a synthetic trace.")
@click.option(
    "--format",
    "table_format",
    type=click.Choice(["auto", "csv", "parquet"]),
    default="auto",
    show_default=True,
    help="Tables as CSV or Parquet (auto: Parquet when pyarrow is installed).",
)
@click.option(
    "--sweep",
    multiple=True,
    metavar="KEY=V1,V2,...",
    help="Run every combination of these settings and compare them (repeatable; keys "
    "PLUGIN.ARGUMENT, reclaimMinRuntime, preemptMinRuntime, usageParams.FIELD).",
)
@click.option("--workers", type=click.IntRange(1), help="Processes of a sweep (default: CPUs).")
@click.option(
    "--executor",
    default="local",
    show_default=True,
    help="Where a sweep runs: 'local' processes, or 'dask:ADDRESS' (a Dask scheduler).",
)
@_backend_option
def replay(
    cluster,
    trace,
    out_dir,
    config_file,
    period,
    until,
    html,
    seed,
    table_format,
    sweep,
    workers,
    executor,
    backend,
) -> None:
    """Replay a workload trace on CLUSTER file(s), one real session per period."""
    from kai.replay.command import run_replay

    code = run_replay(
        list(cluster),
        trace,
        out_dir,
        config_file=config_file,
        period=_duration_option("--period", period),
        until=None if until is None else _duration_option("--until", until),
        html=html,
        seed=seed,
        backend=backend,
        table_format=table_format,
        sweep=sweep,
        workers=workers,
        executor=executor,
        echo=lambda line: click.echo(line, err=True),
    )
    if code:
        sys.exit(code)


def _duration_option(name: str, value: str) -> float:
    from kai.api.quantity import parse_duration

    try:
        seconds = parse_duration(value)
    except ValueError as err:
        raise InputError(str(err), obj=name) from None
    if seconds <= 0:
        raise InputError(f"must be positive, got {value!r}", obj=name)
    return seconds


def _duration_flag(name: str, default: str, help_: str):
    """A flag that takes a Go duration (``500ms``, ``15s``, ``2m``)."""
    return click.option(name, default=default, show_default=True, help=help_)


@main.command()
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="Kubeconfig file.")
@click.option("--context", help="Kubeconfig context (default: its current context).")
@click.option(
    "--scheduler-name",
    default="kai-scheduler",
    show_default=True,
    help="Schedule the pods whose spec.schedulerName is this.",
)
@_duration_flag(
    "--schedule-period", "1s", "Pause between the end of a cycle and the next (Go duration)."
)
@click.option(
    "--scheduler-conf",
    type=click.Path(dir_okay=False),
    help="SchedulerConfiguration file (default: KAI's built-in configuration).",
)
@click.option(
    "--nodepool-label-key",
    default="kai.scheduler/node-pool",
    show_default=True,
    help="Label that splits nodes, queues and podgroups into node pools.",
)
@click.option(
    "--partition-label-value",
    default="",
    show_default=True,
    help="This scheduler's node pool; empty means objects without the label.",
)
@click.option(
    "--listen-address",
    default=None,
    help="Address of /metrics, /healthz and /readyz (port 0: any free port). "
    "[default: :8080; with --once or --dry-run, none unless given]",
)
@click.option(
    "--leader-elect/--no-leader-elect",
    default=True,
    show_default=True,
    help="Elect one active replica with a coordination.k8s.io Lease.",
)
@click.option("--lease-namespace", default="kai-scheduler", show_default=True)
@click.option("--lease-name", default="kai-scheduler", show_default=True)
@_duration_flag(
    "--leader-elect-lease-duration",
    "15s",
    "How long a standby waits, after the leader's last renewal, to take the lease.",
)
@_duration_flag(
    "--leader-elect-renew-deadline",
    "10s",
    "How long the leader keeps trying to renew before it stops scheduling.",
)
@_duration_flag(
    "--leader-elect-retry-period", "2s", "Pause between attempts to take or renew the lease."
)
@_duration_flag(
    "--sync-timeout",
    "2m",
    "How long to wait for the first list of every watched kind before giving up.",
)
@_duration_flag(
    "--watch-timeout",
    "5m",
    "Server-side timeout of each watch; it is reopened from the last version seen.",
)
@click.option("--once", is_flag=True, help="Run one cycle after the cache syncs, then exit.")
@click.option("--dry-run", is_flag=True, help="Compute and log decisions; write nothing.")
@click.option(
    "--qps",
    type=float,
    default=50.0,
    show_default=True,
    help="Client-side limit of API requests per second (0: no limit).",
)
@click.option(
    "--burst",
    type=click.IntRange(min=1),
    default=300,
    show_default=True,
    help="API requests allowed at once above --qps.",
)
@click.option(
    "--bind-workers",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Binds sent to the API server in parallel.",
)
@click.option(
    "--max-consolidation-preemptees",
    type=click.IntRange(min=-1),
    default=None,
    help="Victim jobs one consolidation may move (0: no consolidation, -1: no limit). "
    "[default: the configuration's maxNumberConsolidationPreemptees, else 16]",
)
@click.option(
    "--owner-resources",
    default="",
    help="Extra owner kinds whose metadata is read, comma-separated "
    "GROUP/VERSION/RESOURCE[=Kind] (e.g. jobset.x-k8s.io/v1alpha2/jobsets=JobSet).",
)
@_backend_option
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def run(
    kubeconfig,
    context,
    scheduler_name,
    schedule_period,
    scheduler_conf,
    nodepool_label_key,
    partition_label_value,
    listen_address,
    leader_elect,
    lease_namespace,
    lease_name,
    leader_elect_lease_duration,
    leader_elect_renew_deadline,
    leader_elect_retry_period,
    sync_timeout,
    watch_timeout,
    once,
    dry_run,
    qps,
    burst,
    bind_workers,
    max_consolidation_preemptees,
    owner_resources,
    backend,
    log_level,
) -> None:
    """The live scheduler: watch the cluster, schedule every period, bind and evict."""
    import logging
    import signal

    from kai.config import SchedulerConfig

    try:
        from kai.k8s.scheduler import Scheduler, SchedulerOptions
    except ImportError as err:
        missing = {"kubernetes": "the Kubernetes client", "prometheus_client": "prometheus-client"}
        what = missing.get((err.name or "").split(".")[0])
        if what is None:
            raise
        click.echo(f"kai: error: kai run needs {what}: pip install 'kai[k8s]'", err=True)
        sys.exit(2)
    from kai.k8s.server import parse_listen_address

    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # A closed connection is retried by the informers, which say so once per interval;
    # urllib3's own warning for each attempt would repeat it thousands of times.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    period = _duration_option("--schedule-period", schedule_period)
    durations = {
        flag: _duration_option(flag, value)
        for flag, value in (
            ("--leader-elect-lease-duration", leader_elect_lease_duration),
            ("--leader-elect-renew-deadline", leader_elect_renew_deadline),
            ("--leader-elect-retry-period", leader_elect_retry_period),
            ("--sync-timeout", sync_timeout),
            ("--watch-timeout", watch_timeout),
        )
    }
    lease_duration = durations["--leader-elect-lease-duration"]
    renew_deadline = durations["--leader-elect-renew-deadline"]
    retry_period = durations["--leader-elect-retry-period"]
    if leader_elect and not dry_run and not 0 < retry_period < renew_deadline < lease_duration:
        raise InputError(
            "need 0 < retry period < renew deadline < lease duration",
            obj="--leader-elect-lease-duration",
        )
    if durations["--watch-timeout"] < 1:
        raise InputError("must be at least 1s", obj="--watch-timeout")
    if listen_address is None and not (once or dry_run):
        listen_address = ":8080"
    if listen_address is not None:
        try:
            parse_listen_address(listen_address)
        except ValueError as err:
            raise InputError(str(err), obj="--listen-address") from None
    config_obj = None
    if scheduler_conf:
        from kai.snapshot.loader import load_config_file

        config_obj = load_config_file(scheduler_conf)
    config = SchedulerConfig.from_object(config_obj)
    if max_consolidation_preemptees is not None:
        config.max_consolidation_preemptees = max_consolidation_preemptees
    from kai.k8s.client import KubeClient, KubeConfigError, parse_owner_resource

    owners = [r.strip() for r in owner_resources.split(",") if r.strip()]
    for resource in owners:
        try:
            parse_owner_resource(resource)
        except ValueError as err:
            raise InputError(str(err), obj="--owner-resources") from None
    try:
        client = KubeClient.from_config(kubeconfig, context, qps=qps, burst=burst)
    except KubeConfigError as err:
        raise InputError(str(err), obj="--kubeconfig") from None
    logging.getLogger("kai").info("API server %s (%s)", client.server, client.source)
    options = SchedulerOptions(
        scheduler_name=scheduler_name,
        schedule_period=period,
        nodepool_label_key=nodepool_label_key,
        partition_label_value=partition_label_value,
        listen_address=listen_address,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace,
        lease_name=lease_name,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        sync_timeout=durations["--sync-timeout"],
        watch_timeout=max(1, round(durations["--watch-timeout"])),
        dry_run=dry_run,
        backend=backend,
        bind_workers=bind_workers,
        owner_resources=owners,
    )
    scheduler = Scheduler(client, options, config)

    def _on_signal(signum, _frame) -> None:
        logging.getLogger("kai").info("signal %d: shutting down", signum)
        scheduler.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            signal.signal(sig, _on_signal)
        except ValueError:  # not the main thread (embedded use): no handlers
            pass
    try:
        code = scheduler.run_once() if once else scheduler.run()
    finally:
        client.close()
    sys.exit(code)


def entry() -> None:
    """The ``kai`` console command: :func:`main`, in a process of its own."""
    global _exit_when_done
    _exit_when_done = True
    # kai calls no BLAS routine, so numpy's OpenBLAS need not start a thread per core
    # when it loads (it loads inside the commands; importing kai.cli does not load it).
    # A value the user set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    main()


if __name__ == "__main__":  # pragma: no cover
    entry()
