"""The ``kai`` command line."""

from __future__ import annotations

import json
import os
import sys

import click

from kai.api.errors import InputError


def _fail_input(err: InputError) -> None:
    click.echo(f"kai: error: {err}", err=True)
    sys.exit(2)


class _Group(click.Group):
    """Maps user errors to exit code 2 and anything unexpected to 1, without tracebacks."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except InputError as err:
            _fail_input(err)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            sys.exit(130)
        except Exception as err:  # noqa: BLE001 - last-resort handler of the CLI
            if os.environ.get("KAI_DEBUG"):
                raise
            click.echo(f"kai: internal error: {type(err).__name__}: {err}", err=True)
            click.echo("kai: set KAI_DEBUG=1 for a traceback", err=True)
            sys.exit(1)


@click.group(cls=_Group)
@click.version_option(package_name="kai")
def main() -> None:
    """kai: a batch and GPU scheduling engine for Kubernetes."""


def _split_actions(value: str | None) -> list[str] | None:
    if value is None:
        return None
    actions = [a.strip() for a in value.split(",") if a.strip()]
    if not actions:
        raise InputError("no action named", obj="--actions")
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
    "--backend",
    type=click.Choice(["native", "numba", "python"]),
    help="Compute backend (default: native when built, else numba).",
)
def simulate(snapshot, config_file, actions, now, output, explain, backend) -> None:
    """Run one scheduling session on SNAPSHOT file(s) and print the decisions."""
    from kai.engine import Snapshot, run_session

    snap = Snapshot.from_files(list(snapshot))
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
    result = run_session(
        snap, config=config, actions=_split_actions(actions), now=now_value, backend=backend
    )
    if output == "json":
        json.dump(result.to_json(explain=explain), sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
    else:
        from kai.output import render_table

        click.echo(render_table(result, explain=explain))


if __name__ == "__main__":  # pragma: no cover
    main()
