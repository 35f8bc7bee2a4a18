"""The `fleet` command line: a thin shell over the pure core."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from fleet.core.scenario import ConfigError
from fleet.presets import load_preset, preset_names

app = typer.Typer(
    help="Autoscaler and eviction-policy service for rented GPU pools serving LLM tokens.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(width=None if sys.stdout.isatty() else 120)
err_console = Console(stderr=True)


class UsageError(Exception):
    """A bad input named by the message; exits with status 2 and no traceback."""


@app.command("presets")
def presets_cmd() -> None:
    """List the presets with a one-line story each."""
    from rich.table import Table

    table = Table("preset", "the month", "the fix", box=None)
    for name in preset_names():
        p = load_preset(name)
        table.add_row(name, p.scenario.story, p.scenario.fix_story)
    console.print(table)


@app.command("replay")
def replay_cmd(
    preset: Annotated[Optional[str], typer.Option("--preset", "-p", help="Preset name or path to a preset TOML file.")] = None,
    all_presets: Annotated[bool, typer.Option("--all", help="Replay every preset and its fix.")] = False,
    fix: Annotated[bool, typer.Option("--fix", help="Replay the preset's fix instead.")] = False,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a parameter, KEY=VALUE (repeatable), e.g. policy.window=day.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Redraw the month with this seed.")] = None,
    seeds: Annotated[int, typer.Option("--seeds", help="Replay this many seeds (seed, seed+1, ...) and print the spread of each figure.", min=1)] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (a list with --all or --seeds).")] = False,
    export: Annotated[Optional[Path], typer.Option("--export", help="Write cards.csv, intervals.csv, hours.csv, evictions.csv and summary.json to this folder.")] = None,
    db: Annotated[Optional[str], typer.Option("--db", help="Replay the month stored at this database URL (the preset gives market, demand and policy).")] = None,
    telemetry: Annotated[Optional[Path], typer.Option("--telemetry", help="Replay the month in this telemetry file (CSV, JSON Lines or Parquet).")] = None,
) -> None:
    """Replay a month of a pool under a policy and give its verdict with every figure.

    The month is drawn from the preset's seed, or, with --db or --telemetry, read from a real
    pool's telemetry: the preset then gives the market, demand and policy, and the ideal operator
    uses hindsight (each card's whole-month mean rate as its true rate).
    """
    from fleet.report.verdict import render_spread, render_verdict, spread
    from fleet.presets import replay_scenario
    from fleet.report.export import export_month

    if all_presets == (preset is not None):
        raise UsageError("give one of --preset NAME or --all")
    if all_presets and (set_ or export or seeds > 1 or db or telemetry):
        raise UsageError("--all cannot be combined with --set, --export, --seeds, --db or --telemetry")
    if db and telemetry:
        raise UsageError("give one of --db URL or --telemetry FILE")
    if (db or telemetry) and seeds > 1:
        raise UsageError("--seeds redraws a simulated month; a stored month has one draw")
    names = preset_names() if all_presets else [preset]
    runs = [(n, f) for n in names for f in ((False, True) if all_presets else (fix,))]
    out = []
    for name, f in runs:
        p = load_preset(name)
        scenario = p.resolve(fix=f, overrides=set_ or [], seed=seed)
        base_dir = p.path.parent if p.path else None
        if seeds > 1:
            rows = []
            from rich.progress import track

            for s in track(range(scenario.seed, scenario.seed + seeds), description=f"{p.name} seeds", console=err_console, transient=True):
                r = replay_scenario(scenario.model_copy(update={"seed": s}), base_dir=base_dir)
                r.figures["fix"] = f
                rows.append(r.figures)
            summary = spread(rows)
            if as_json:
                out.append({"preset": p.name, "fix": f, "seeds": [scenario.seed, scenario.seed + seeds - 1], "spread": summary})
            else:
                render_spread(console, p, f, seeds, scenario.seed, summary)
            continue
        month = None
        if db or telemetry:
            from fleet.ingest.stored_month import month_from_store, month_from_telemetry_file

            month = month_from_store(db, scenario, base_dir=base_dir) if db else month_from_telemetry_file(telemetry, scenario, base_dir=base_dir)
        r = replay_scenario(scenario, month=month, base_dir=base_dir)
        r.figures["fix"] = f
        if db or telemetry:
            from storage.db import shown_url

            r.figures["source"] = shown_url(db) if db else str(telemetry)  # never a password
        if export:
            export_month(r, export)
        if as_json:
            out.append(r.figures)
        else:
            render_verdict(console, p, f, r)
    if as_json:
        from fleet.core.verdict import json_safe

        payload = out[0] if len(out) == 1 else out
        typer.echo(json.dumps(json_safe(payload), indent=2))


def _register_extensions() -> None:
    """Command groups that live in their own modules."""
    import importlib

    for module in ("fleet.cli.store", "fleet.cli.compare", "fleet.cli.serve"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name == module:
                continue
            raise
        mod.register(app)


_register_extensions()


def _exit(message: str, status: int) -> None:
    if "://" in message:  # an error naming a database URL, from anywhere: never with its password
        from storage.db import hide_passwords

        message = hide_passwords(message)
    err_console.print(message, markup=False, highlight=False, soft_wrap=True)
    sys.exit(status)


def _run_time_failure(err: Exception) -> str | None:
    """The one line of a failure at run time (a refused database write, a file that cannot be written), or None."""
    from storage.db import failure_reason

    reason = failure_reason(err)
    if reason is None and isinstance(err, OSError):
        where = f"{err.filename}: " if err.filename else ""
        reason = f"{where}{err.strerror or err}"
    return reason


def main() -> None:
    """The `fleet` command. Exit status: 0 ok, 1 a failed write or other run-time failure, 2 bad input or usage,
    130 interrupted; a failure is one line on stderr and never status 0."""
    from fleet.cli.memory import keep_freed_memory

    keep_freed_memory()  # large months allocate and free big temporaries: reuse them, don't refault them
    try:
        # Not standalone, so errors come here to be told as one line; a command's exit status comes back as the value.
        status = app(standalone_mode=False)
    except (ConfigError, UsageError) as err:
        _exit(f"fleet: error: {err}", 2)
    except typer.Abort as err:  # click's own Ctrl-C, in typers that turn KeyboardInterrupt into Abort
        _exit("fleet: interrupted" if isinstance(err.__context__, KeyboardInterrupt) else "fleet: aborted", 130)
    except KeyboardInterrupt:
        _exit("fleet: interrupted", 130)
    except Exception as err:  # click's own usage errors (typer >= 0.2x carries its own copy of click)
        try:
            from click import ClickException
        except ModuleNotFoundError:
            from typer._click.exceptions import ClickException

        if isinstance(err, ClickException):
            err.show()
            sys.exit(err.exit_code)
        reason = _run_time_failure(err)
        if reason is None:
            raise
        _exit(f"fleet: error: {reason}", 1)
    if status == 130:  # typer turns Ctrl-C into Exit(130)
        _exit("fleet: interrupted", 130)
    if isinstance(status, int) and not isinstance(status, bool) and status:
        sys.exit(status)


if __name__ == "__main__":
    main()
