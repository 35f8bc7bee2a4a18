"""The `fleet` command line: a thin shell over the pure core."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from fleet.cli.output import UsageError, console, err_console  # noqa: F401  (re-exported: the commands' one console)
from fleet.core.errors import ConfigError
from fleet.core.units import HOUR_S

HELP_OPTION_NAMES = ["-h", "--help"]

app = typer.Typer(
    help="Autoscaler and eviction-policy service for rented GPU pools serving LLM tokens.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion and --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": HELP_OPTION_NAMES},
)
def _hide_flag_types() -> None:
    """A flag takes no value, so help shows no `<bool>` beside it; options that take one keep their type.

    Typer prints every option's type in the help's second column and offers no setting to leave it out for flags:
    the one place that column is drawn is wrapped here, for every command at once."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "hides_flags", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) and not getattr(self, "count", False) else shown(self, ctx)

    display_type_rich.hides_flags = True
    TyperOption.display_type_rich = display_type_rich


_hide_flag_types()

from fleet.cli.help import hook as _hook_help  # noqa: E402

_hook_help()


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            from fleet import DISTRIBUTION

            typer.echo(f"fleet {version(DISTRIBUTION)}")
        except PackageNotFoundError:
            typer.echo("fleet (not installed: no version)")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[bool, typer.Option("--version", "-V", help="Print fleet's version and exit.", callback=_version, is_eager=True)] = False,
) -> None:
    """Autoscaler and eviction-policy service for rented GPU pools serving LLM tokens."""


@app.command("presets")
def presets_cmd() -> None:
    """List the presets with a one-line story each."""
    from rich.table import Table

    from fleet.presets import load_preset, preset_names

    table = Table("preset", "the month", "the fix", box=None)
    for name in preset_names():
        p = load_preset(name)
        table.add_row(name, p.scenario.story, p.scenario.fix_story)
    console.print(table)


@app.command("replay")
def replay_cmd(
    preset: Annotated[Optional[str], typer.Option("--preset", "-p", help="Preset name or path to a preset TOML file.")] = None,
    all_presets: Annotated[bool, typer.Option("--all", help="Replay every preset and its fix.")] = False,
    fix: Annotated[bool, typer.Option("--fix", help="Replay the preset's fix instead (with --all: every preset's fix only).")] = False,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a parameter, KEY=VALUE (repeatable), e.g. policy.window=day.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Redraw the month with this seed (0 or more).")] = None,
    seeds: Annotated[int, typer.Option("--seeds", help="Replay this many seeds (seed, seed+1, ...) and print the spread of each figure.", min=1)] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (a list with --all or --seeds); dollars to the cent.")] = False,
    export: Annotated[Optional[Path], typer.Option("--export", help="Write cards.csv, intervals.csv, hours.csv, evictions.csv and summary.json to this folder (adds.csv too with a reactive loop; with --seeds: one folder a seed, seed-N/, and spread.json).")] = None,
    db: Annotated[Optional[str], typer.Option("--db", help="Replay the month stored at this database URL (the preset gives market, demand and policy).")] = None,
    telemetry: Annotated[Optional[Path], typer.Option("--telemetry", help="Replay the month in this telemetry file (CSV, JSON Lines or Parquet).")] = None,
) -> None:
    """Replay a month of a pool under a policy and give its verdict with every figure.

    The month is drawn from the preset's seed, or, with --db or --telemetry, read from a real pool's telemetry: the preset then gives the market, demand and policy, and the ideal operator uses hindsight (each card's whole-month mean rate as its true rate). A stored month shorter than the preset's warm-up + hours replays every hour it holds after a shorter warm-up.
    """
    from fleet.presets import load_preset, preset_names, resolve_scenario

    if all_presets == (preset is not None):
        raise UsageError("give one of --preset NAME or --all")
    if all_presets and (set_ or export or seeds > 1 or db or telemetry):
        raise UsageError("--all cannot be combined with --set, --export, --seeds, --db or --telemetry")
    if db and telemetry:
        raise UsageError("give one of --db URL or --telemetry FILE")
    if (db or telemetry) and seeds > 1:
        raise UsageError("--seeds redraws a simulated month; a stored month has one draw")
    if seed is not None and seed < 0:
        raise UsageError(f"--seed {seed}: a seed is a whole number, 0 or more")
    if export is not None:
        from fleet.report.export import export_folder_problem

        problem = export_folder_problem(export)
        if problem:
            raise UsageError(f"--export {export}: {problem}")
    names = preset_names() if all_presets else [preset]
    runs = [(n, f) for n in names for f in (((True,) if fix else (False, True)) if all_presets else (fix,))]
    out = []
    for name, f in runs:
        p = load_preset(name)
        scenario = resolve_scenario(p, fix=f, overrides=set_ or [], seed=seed)
        if seeds > 1:
            _replay_seeds(p, f, scenario, seeds, as_json, export, out)
        else:
            _replay_one(p, f, scenario, set_ or [], as_json, export, db, telemetry, out)
    if as_json:
        from fleet.core.verdict import json_safe
        from fleet.report.export import cents

        payload = out[0] if len(out) == 1 else out
        typer.echo(json.dumps(cents(json_safe(payload)), indent=2))


def _replay_seeds(p, fix: bool, scenario, seeds: int, as_json: bool, export: Path | None, out: list) -> None:
    """`--seeds N`: the spread of every figure over N draws; with `--export`, each draw's files and the spread."""
    from rich.progress import track

    from fleet.presets import replay_scenario
    from fleet.report.export import export_month
    from fleet.report.verdict import render_spread, spread

    rows = []
    first = scenario.seed
    for s in track(range(first, first + seeds), description=f"{p.name} seeds", console=err_console, transient=True):
        r = replay_scenario(scenario.model_copy(update={"seed": s}), base_dir=p.base_dir)
        r.figures["fix"] = fix
        if export is not None:
            export_month(r, export / f"seed-{s}")
        rows.append(r.figures)
    summary = spread(rows)
    got = {"preset": p.name, "fix": fix, "seeds": list(range(first, first + seeds)), "spread": summary}  # every seed
    if export is not None:
        from fleet.core.verdict import json_safe
        from fleet.report.export import cents

        (export / "spread.json").write_text(json.dumps(cents(json_safe(got)), indent=2) + "\n")
    if as_json:
        out.append(got)
    else:
        render_spread(console, p, fix, seeds, first, summary)


def _replay_one(p, fix: bool, scenario, overrides: list[str], as_json: bool, export: Path | None, db, telemetry, out: list) -> None:
    from fleet.presets import replay_scenario
    from fleet.report.export import export_month
    from fleet.report.verdict import render_verdict

    month = span = None
    if db or telemetry:
        month, scenario, span = _stored_month(scenario, db, telemetry, p.base_dir)
    r = replay_scenario(scenario, month=month, base_dir=p.base_dir)
    r.figures["fix"] = fix
    if db or telemetry:
        from storage.db import shown_url

        r.figures["source"] = shown_url(db) if db else str(telemetry)  # never a password
        r.figures["warmup_hours"] = span.warmup_hours
        if span.stored_hours is not None:
            r.figures["stored_hours"] = span.stored_hours
        if span.is_short and as_json:  # the text verdict says it in its policy line
            err_console.print(f"fleet: note: {r.figures['source']}: {span.describe()}", markup=False, highlight=False, soft_wrap=True)
    if export:
        export_month(r, export)
    if as_json:
        out.append(r.figures)
    else:
        render_verdict(console, p, fix, r, overrides, span)


def _stored_month(scenario, db: str | None, telemetry: Path | None, base_dir: Path | None):
    """The month in a store or a telemetry file, its span fitted to the hours stored: (month, scenario, span)."""
    from fleet.ingest import stored_month
    from fleet.presets import StoredSpan, fit_stored_span

    full = StoredSpan(None, scenario.warmup_hours, scenario.hours, scenario.warmup_hours, scenario.hours)
    if db:
        from fleet.cli.journal import refuse_missing_sqlite_file
        from storage.open import open_store

        refuse_missing_sqlite_file(db)  # a read: a mistyped path is an error, never a new empty store
        try:
            return stored_month.month_from_store(db, scenario, base_dir=base_dir), scenario, full
        except ConfigError as err:  # too short, maybe: then every stored hour is replayed after a shorter warm-up
            store = open_store(db)  # refused, nothing created or changed, unless a fleet store at this schema
            try:
                rollups = store.telemetry.hourly_rollups()
            finally:
                store.close()
            if _hours_held(rollups) >= scenario.warmup_hours + scenario.hours:
                raise err from None
    else:
        rollups = _telemetry_rollups(telemetry, scenario)
    if rollups.empty:
        raise ConfigError(f"{_shown_source(db, telemetry)}: no stored telemetry to replay")
    from dataclasses import replace

    month_hours = scenario.hours  # a monthly rent pays for these, however few of them the store holds
    scenario, span = fit_stored_span(scenario, _hours_held(rollups))
    month = stored_month.month_from_rollups(rollups, scenario, base_dir=base_dir)
    return replace(month, rent_hours=month_hours), scenario, span


def _hours_held(rollups) -> int:
    """Hours from the first stored hour to the last, both counted."""
    if rollups.empty:
        return 0
    return (int(rollups["hour_ts"].max()) - int(rollups["hour_ts"].min())) // HOUR_S + 1


def _shown_source(db: str | None, telemetry: Path | None) -> str:
    from storage.db import shown_url

    return f"database {shown_url(db)!r}" if db else f"telemetry file {str(telemetry)!r}"


def _telemetry_rollups(path: Path, scenario):
    """The hourly rollups of a telemetry file, as `fleet.ingest.stored_month.load_telemetry_file` makes them."""
    from fleet.ingest.stored_month import telemetry_rollups

    return telemetry_rollups(path, scenario)[0]


def _register_extensions() -> None:
    """Command groups that live in their own modules."""
    for module in ("fleet.cli.store", "fleet.cli.compare_command", "fleet.cli.serve", "fleet.cli.journal", "fleet.cli.quarantine", "fleet.cli.classes", "fleet.cli.card"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name == module:
                continue
            raise
        mod.register(app)


_register_extensions()


def _click_exceptions() -> tuple[type, ...]:
    """Click's usage-error class, from typer's own copy of click and from click itself where either is installed:
    a typer that carries its own copy raises that one's, even when click is installed beside it."""
    found: list[type] = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(importlib.import_module(module).ClickException)
        except (ModuleNotFoundError, AttributeError):
            continue
    return tuple(found)


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


def _tell_moved_keys() -> None:
    """A config key read at its old place is told once, as one line on stderr naming where it is written now, not as
    Python's two-line warning with a source line."""
    import warnings

    from fleet.core.errors import MovedKey

    shown = warnings.showwarning
    told: set[str] = set()  # a config read twice in one command (resolved, then replayed) tells each key once

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, MovedKey):
            return shown(message, category, filename, lineno, file, line)
        if str(message) in told:
            return None
        told.add(str(message))
        err_console.print(f"fleet: warning: {message}", markup=False, highlight=False, soft_wrap=True)

    warnings.showwarning = show


def main() -> None:
    """The `fleet` command. Exit status: 0 ok, 1 a failed write or other run-time failure, 2 bad input or usage,
    130 interrupted; a failure is one line on stderr and never status 0."""
    from fleet.memory import keep_freed_memory, one_blas_thread

    keep_freed_memory()  # large months allocate and free big temporaries: reuse them, don't refault them
    one_blas_thread()  # the bill's products are small: threads cost more than they give
    _tell_moved_keys()
    try:
        # Not standalone, so errors come here to be told as one line; a command's exit status comes back as the value.
        status = app(standalone_mode=False, prog_name="fleet")
    except (ConfigError, UsageError) as err:
        _exit(f"fleet: error: {err}", 2)
    except typer.Abort as err:  # click's own Ctrl-C, in typers that turn KeyboardInterrupt into Abort
        _exit("fleet: interrupted" if isinstance(err.__context__, KeyboardInterrupt) else "fleet: aborted", 130)
    except KeyboardInterrupt:
        _exit("fleet: interrupted", 130)
    except Exception as err:  # click's own usage errors (typer >= 0.2x carries its own copy of click)
        if isinstance(err, _click_exceptions()):
            if err.exit_code == 2:  # a usage error: one line, as every other bad input
                from fleet.cli.usage import usage_line

                _exit(f"fleet: error: {usage_line(err, sys.argv[1:])}", 2)
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
    # `python -m fleet.cli.app` runs this file as `__main__`, a second copy of the module: run the one the command
    # modules import (`fleet.cli.app`), so the errors they raise are the ones `main` knows.
    from fleet.cli.app import main as _main

    _main()
