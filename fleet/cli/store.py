"""`fleet ingest` and `fleet db`: telemetry into the store, and the store's schema. A thin shell over
`fleet.ingest` and `storage`; the clock is read here and passed in."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from storage import DEFAULT_URL

console = Console()
err_console = Console(stderr=True)
PROGRESS_MIN_RECORDS = 200_000  # a progress bar on files at least this long

DbOption = Annotated[str, typer.Option("--db", envvar="FLEET_DB", help="SQLAlchemy database URL (default: fleet.db in the working folder).")]


def _open(url: str):
    from storage import open_repository

    return open_repository(url)


def _print_report(out: dict, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(out))
        return
    console.print(
        f"{out['source']}: read {out['read']:,} = stored {out['stored']:,} + duplicates {out['duplicates']:,} + quarantined {out['quarantined']:,}",
        markup=False, highlight=False, soft_wrap=True,
    )
    for why, n in out["reasons"].items():
        console.print(f"  quarantined {n:>10,}  {why}", markup=False, highlight=False)


def ingest_cmd(
    file: Annotated[Optional[Path], typer.Argument(help="A CSV, JSON Lines (.jsonl/.ndjson) or Parquet file of telemetry records.")] = None,
    db: DbOption = DEFAULT_URL,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: read, stored, duplicates, quarantined, reasons.")] = False,
    strict: Annotated[bool, typer.Option("--strict/--register-unknown", help="Quarantine records of undeclared cards, or register such cards on first sight.")] = False,
    pool: Annotated[Optional[Path], typer.Option("--pool", help="Pool file (TOML) declaring classes and cards before ingest.")] = None,
    card_class: Annotated[Optional[str], typer.Option("--class", help="Class of cards registered on first sight whose record names none.")] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", help="csv, jsonl or parquet (default: from the file's suffix).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Records per transaction.", min=1)] = 100_000,
    plausible_factor: Annotated[float, typer.Option("--plausible-factor", help="Quarantine rates above this × the class's rated rate.")] = 5.0,
    watch: Annotated[Optional[Path], typer.Option("--watch", help="Drop folder: take each ready file once, move it to done/ or failed/.")] = None,
    once: Annotated[bool, typer.Option("--once", help="With --watch: take what is ready now, then stop.")] = False,
    settle: Annotated[float, typer.Option("--settle", help="With --watch: seconds a file must be untouched before it is taken.", min=0)] = 2.0,
    interval: Annotated[float, typer.Option("--interval", help="With --watch: seconds between scans.", min=0.05)] = 5.0,
    prometheus: Annotated[Optional[str], typer.Option("--prometheus", help="Prometheus base URL to pull a range query from.")] = None,
    query: Annotated[Optional[str], typer.Option("--query", help="PromQL giving tokens/s per card (default: vLLM's generation rate by instance).")] = None,
    start: Annotated[Optional[float], typer.Option("--start", help="With --prometheus: range start, epoch seconds (default: an hour ago).")] = None,
    end: Annotated[Optional[float], typer.Option("--end", help="With --prometheus: range end, epoch seconds (default: now).")] = None,
    step: Annotated[float, typer.Option("--step", help="With --prometheus: seconds between points.", min=1)] = 60.0,
    card_label: Annotated[str, typer.Option("--card-label", help="With --prometheus: the series label naming the card.")] = "instance",
) -> None:
    """Put telemetry into the store: every record stored, a duplicate, or quarantined with its reason."""
    from fleet.cli.app import UsageError
    from fleet.ingest import DEFAULT_PROMETHEUS_QUERY, IngestSettings, declare_pool, drain_drop_folder, ingest_parsed, ingest_prometheus, load_pool, read_file

    sources = sum(x is not None for x in (file, watch, prometheus))
    if sources != 1:
        raise UsageError("give one of FILE, --watch DIR or --prometheus URL")
    if query is not None and prometheus is None:
        raise UsageError("--query goes with --prometheus")
    pool_decl = load_pool(pool) if pool else None

    def settings() -> IngestSettings:
        default = card_class or (pool_decl.default_class if pool_decl else None) or "unassigned"
        return IngestSettings(now_ts=int(time.time()), strict=strict, default_class=default,
                              plausible_factor=plausible_factor, batch_records=batch_size)

    settings()  # a bad option is an error before anything is opened
    if file is not None:
        parsed = read_file(file, fmt)  # a bad file fails here, before the store is touched
    repo = _open(db)
    if pool_decl:
        declare_pool(repo, pool_decl, int(time.time()))

    if file is not None:
        n = parsed.n_records
        show = n >= PROGRESS_MIN_RECORDS and err_console.is_terminal and not as_json
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=err_console, transient=True, disable=not show) as bar:
            task = bar.add_task(f"ingest {file.name}", total=n)
            report = ingest_parsed(repo, parsed, settings(), progress=lambda k: bar.advance(task, k))
        _print_report(report.as_json(), as_json)
        return

    if prometheus is not None:
        now = time.time()
        t_end = end if end is not None else now
        t_start = start if start is not None else t_end - 3600
        report = ingest_prometheus(repo, prometheus, query or DEFAULT_PROMETHEUS_QUERY, t_start, t_end, step, settings(), card_label)
        _print_report(report.as_json(), as_json)
        return

    failed = 0
    while True:
        for result in drain_drop_folder(repo, watch, settings, settle_s=settle):
            if result.report is not None:
                _print_report(result.report.as_json(), as_json)
                continue
            failed += 1
            if as_json:
                typer.echo(json.dumps({"source": str(watch / result.name), "error": result.error}))
            else:
                err_console.print(f"fleet: {result.error} (moved to failed/)", markup=False, highlight=False, soft_wrap=True)
        if once:
            if failed:
                raise typer.Exit(2)  # a bad file, told above, moved to failed/
            return
        time.sleep(interval)


def db_upgrade_cmd(
    db: DbOption = DEFAULT_URL,
    revision: Annotated[str, typer.Option("--revision", help="Target revision.")] = "head",
) -> None:
    """Bring the database to the newest schema (Alembic's upgrade), keeping its data."""
    from storage.db import current_revision, make_engine, shown_url, upgrade

    engine = make_engine(db)
    before = current_revision(engine)
    after = upgrade(db, revision, engine=engine)
    console.print(f"{shown_url(db)}: schema {before or 'empty'} -> {after}" if before != after else f"{shown_url(db)}: schema already at {after}",
                  markup=False, highlight=False, soft_wrap=True)


def db_current_cmd(db: DbOption = DEFAULT_URL) -> None:
    """Print the database's schema revision (Alembic's current)."""
    from storage.db import current_revision, head_revision, make_engine

    rev = current_revision(make_engine(db))
    head = head_revision()
    console.print(f"{rev} (head)" if rev == head else f"{rev or 'none'} (head is {head}; run `fleet db upgrade`)", markup=False, highlight=False)


DAY_S = 86_400


def db_prune_cmd(
    raw_older_than: Annotated[int, typer.Option("--raw-older-than", metavar="DAYS", min=1,
                                                help="Delete raw samples of whole hours that ended more than this many days ago and are rolled up.")],
    db: DbOption = DEFAULT_URL,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: samples, cards, before_ts, before.")] = False,
) -> None:
    """Delete old raw samples whose hours are rolled up; rollups, scores, the journal and bills are kept."""
    from datetime import datetime, timezone

    from storage.db import shown_url

    repo = _open(db)
    pruned = repo.prune_raw(int(time.time()) - raw_older_than * DAY_S)
    before = datetime.fromtimestamp(pruned.before_ts, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    if as_json:
        typer.echo(json.dumps({"samples": pruned.samples, "cards": pruned.cards, "before_ts": pruned.before_ts, "before": before}))
        return
    console.print(f"{shown_url(db)}: deleted {pruned.samples:,} raw samples of {pruned.cards:,} cards from hours before {before}; "
                  "hourly rollups, scores, the journal and bills kept", markup=False, highlight=False, soft_wrap=True)


def db_copy_cmd(
    from_url: Annotated[str, typer.Option("--from", metavar="URL", help="The store to copy (SQLAlchemy URL).")],
    to_url: Annotated[str, typer.Option("--to", metavar="URL", help="An empty database to copy it into (SQLAlchemy URL).")],
    batch_rows: Annotated[int, typer.Option("--batch-rows", min=1, help="Rows read and written at a time.")] = 10_000,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: from, to, revision, rows per table.")] = False,
) -> None:
    """Copy a whole store into an empty database (any backends), table by table; every table's row count is checked."""
    from storage.copy import CopyCheckFailed, copy_store

    try:
        report = copy_store(from_url, to_url, batch_rows)
    except CopyCheckFailed as err:
        err_console.print(f"fleet: error: {err}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(report.as_json()))
        return
    rows = sum(t.rows for t in report.tables)
    console.print(f"{report.source} -> {report.target}: {rows:,} rows in {len(report.tables)} tables at schema revision "
                  f"{report.revision}, every table's count checked", markup=False, highlight=False, soft_wrap=True)
    for t in report.tables:
        console.print(f"  {t.name:<22} {t.rows:>12,}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    # A failed write is exit status 1 with one line, told by `fleet.cli.app.main` for every command.
    app.command("ingest")(ingest_cmd)
    db = typer.Typer(help="The store's schema (upgrade it, show its revision), the retention of raw samples, and a copy of a whole store.", no_args_is_help=True)
    db.command("upgrade")(db_upgrade_cmd)
    db.command("current")(db_current_cmd)
    db.command("prune")(db_prune_cmd)
    db.command("copy")(db_copy_cmd)
    app.add_typer(db, name="db")
