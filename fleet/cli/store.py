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
from fleet.core.units import HOUR_S

console = Console()
err_console = Console(stderr=True)
PROGRESS_MIN_RECORDS = 200_000  # a progress bar on files at least this long

DbOption = Annotated[str, typer.Option("--db", envvar="FLEET_DB", help="SQLAlchemy database URL (default: fleet.db in the working folder).")]


def _open(url: str, writing: str | None = None):
    """The telemetry side of the store at `url` (made if new); with `writing` (what a real pool's writer would
    write), a store that holds a simulation is refused in one line (exit status 2) before anything is written."""
    from storage import open_store

    store = open_store(url, create=True)
    if writing is not None:
        from storage.identity import StoreIdentity

        store.identity.refuse_other(StoreIdentity.pool(), writing)
    return store.telemetry


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
    if out.get("replaced"):
        console.print(f"  replaced    {out['replaced']:>10,}  stored demand samples, each change journaled", markup=False, highlight=False)


def ingest_cmd(
    file: Annotated[Optional[Path], typer.Argument(help="A CSV, JSON Lines (.jsonl/.ndjson) or Parquet file of telemetry records.")] = None,
    db: DbOption = DEFAULT_URL,
    demand: Annotated[Optional[Path], typer.Option("--demand", help="A file of the pool's measured demand (CSV, JSON Lines or Parquet): ts, demand_tps (tokens/s offered).")] = None,
    replace: Annotated[bool, typer.Option("--replace", help="With --demand: a new value for a stored second is a correction, written over the stored one and journaled (default: quarantined as conflicting-duplicate).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: read, stored, duplicates, quarantined, reasons.")] = False,
    strict: Annotated[bool, typer.Option("--strict/--register-unknown", help="Quarantine records of undeclared cards, or register such cards on first sight.")] = False,
    pool: Annotated[Optional[Path], typer.Option("--pool", help="Pool file (TOML) declaring classes and cards before ingest.")] = None,
    card_class: Annotated[Optional[str], typer.Option("--class", help="Class of cards registered on first sight whose record names none.")] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", help="csv, jsonl or parquet (default: from the file's suffix).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Records per transaction.", min=1)] = 100_000,
    plausible_factor: Annotated[float, typer.Option("--plausible-factor", help="Quarantine rates above this × the class's rated rate.")] = 5.0,
    watch: Annotated[Optional[Path], typer.Option("--watch", help="Drop folder: take each ready file once, move it to done/ or failed/.")] = None,
    once: Annotated[bool, typer.Option("--once", help="With --watch: take what is ready now, then stop.")] = False,
    settle: Annotated[Optional[float], typer.Option("--settle", help="With --watch: seconds a file must be untouched before it is taken (default: 2).", min=0)] = None,
    interval: Annotated[float, typer.Option("--interval", help="With --watch: seconds between scans.", min=0.05)] = 5.0,
    prometheus: Annotated[Optional[str], typer.Option("--prometheus", help="Prometheus base URL to pull a range query from.")] = None,
    query: Annotated[Optional[str], typer.Option("--query", help="PromQL giving tokens/s per card (default: vLLM's generation rate by instance).")] = None,
    start: Annotated[Optional[float], typer.Option("--start", help="With --prometheus: range start, epoch seconds (default: an hour ago).")] = None,
    end: Annotated[Optional[float], typer.Option("--end", help="With --prometheus: range end, epoch seconds (default: now).")] = None,
    step: Annotated[float, typer.Option("--step", help="With --prometheus: seconds between points.", min=1)] = 60.0,
    card_label: Annotated[Optional[list[str]], typer.Option("--card-label", help="With --prometheus: the series label naming the card (repeat for several, e.g. a DCGM exporter's Hostname and gpu; default: instance).")] = None,
    busy_query: Annotated[Optional[str], typer.Option("--busy-query", help="With --prometheus: PromQL giving each card's busy fraction (default: the share of the step vLLM had a request running; \"\" for none).")] = None,
    bearer_token_file: Annotated[Optional[Path], typer.Option("--bearer-token-file", help="With --prometheus: a file holding a bearer token.")] = None,
    bearer_token_env: Annotated[Optional[str], typer.Option("--bearer-token-env", metavar="VAR", help="With --prometheus: an environment variable holding a bearer token.")] = None,
    username: Annotated[Optional[str], typer.Option("--username", help="With --prometheus: basic auth's user (with --password-file or --password-env).")] = None,
    password_file: Annotated[Optional[Path], typer.Option("--password-file", help="With --prometheus: a file holding basic auth's password.")] = None,
    password_env: Annotated[Optional[str], typer.Option("--password-env", metavar="VAR", help="With --prometheus: an environment variable holding basic auth's password.")] = None,
) -> None:
    """Put telemetry into the store: every record stored, a duplicate, or quarantined with its reason.

    Exit status: 0 every record stored (or already there), 3 some quarantined, 1 nothing stored because every
    record was quarantined (or a store write failed), 2 bad usage, input or config (with --watch --once: a file
    went to failed/) or a simulation's store (nothing written). --demand is judged as telemetry is, with the same
    statuses."""
    from fleet.cli.output import UsageError
    from fleet.ingest import IngestSettings, declare_pool, load_pool, read_file

    sources = sum(x is not None for x in (file, watch, prometheus, demand))
    if sources != 1:
        raise UsageError("give one of FILE, --watch DIR, --prometheus URL or --demand FILE")
    if replace and demand is None:
        raise UsageError("--replace goes with --demand")
    if demand is not None:
        _ingest_demand(demand, db, as_json, fmt, replace, plausible_factor, batch_size)
    pull_flags = {"--query": query, "--busy-query": busy_query, "--card-label": card_label, "--bearer-token-file": bearer_token_file,
                  "--bearer-token-env": bearer_token_env, "--username": username, "--password-file": password_file, "--password-env": password_env}
    given = [flag for flag, value in pull_flags.items() if value is not None]
    if given and prometheus is None:
        raise UsageError(f"{given[0]} goes with --prometheus")
    if settle is not None and watch is None:
        raise UsageError("--settle goes with --watch")
    auth = _credentials(bearer_token_file, bearer_token_env, username, password_file, password_env)
    if auth is not None:
        auth.authorization()  # an unreadable secret is an error now, before the store is opened (never shown)
    pool_decl = load_pool(pool) if pool else None

    def settings() -> IngestSettings:
        default = card_class or (pool_decl.default_class if pool_decl else None) or "unassigned"
        return IngestSettings(now_ts=int(time.time()), strict=strict, default_class=default,
                              plausible_factor=plausible_factor, batch_records=batch_size)

    settings()  # a bad option is an error before anything is opened
    if file is not None:
        parsed = read_file(file, fmt)  # a bad file fails here, before the store is touched
    if prometheus is not None:  # so does a bad URL or a server that does not answer: the pull comes first
        parsed = _pull(prometheus, query, start, end, step, card_label, busy_query, auth)
    repo = _open(db, "a real pool's telemetry")
    if pool_decl:
        declare_pool(repo, pool_decl.classes, pool_decl.card_classes(), int(time.time()))

    if file is not None or prometheus is not None:
        report = _ingest_parsed(repo, parsed, settings(), f"ingest {file.name}" if file is not None else None, as_json)
        _print_report(report.as_json(), as_json)
        raise typer.Exit(ingest_status([report]))
    raise typer.Exit(_watch(repo, watch, settings, settle, once, interval, as_json))


def _ingest_parsed(repo, parsed, settings, label: str | None, as_json: bool):
    """A file's records (`label`: with a progress bar on a terminal, when there are many) or a pull's, stored."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from fleet.ingest import ingest_parsed

    n = parsed.n_records
    show = label is not None and n >= PROGRESS_MIN_RECORDS and err_console.is_terminal and not as_json
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err_console, transient=True, disable=not show) as bar:
        task = bar.add_task(label or "ingest", total=n)
        return ingest_parsed(repo, parsed, settings, progress=lambda k: bar.advance(task, k))


def _watch(repo, watch: Path, settings, settle: float | None, once: bool, interval: float, as_json: bool) -> int:
    """`--watch`: take each ready file of the drop folder, every `interval` seconds; with `once`, what is ready now,
    returning the exit status (2 when a file went to failed/). The folder and `--settle` are the keys of the source
    the registry finds for them (`fleet.ingest.sources`: the service's drop folder), its default settle included."""
    from fleet.ingest.sources import source_for

    keys = {"folder": str(watch), **({} if settle is None else {"settle_s": settle})}
    source = source_for(keys, "fleet ingest --watch")
    failed = 0
    reports = []
    while True:
        for result in source.drain(repo, settings):
            if result.report is not None:
                reports.append(result.report)
                _print_report(result.report.as_json(), as_json)
                continue
            failed += 1
            if as_json:
                typer.echo(json.dumps({"source": result.source or str(watch / result.name), "error": result.error}))
            else:
                err_console.print(f"fleet: error: {result.error} (moved to failed/)", markup=False, highlight=False, soft_wrap=True)
        if once:
            return 2 if failed else ingest_status(reports)  # a bad file, told above, moved to failed/
        time.sleep(interval)


def _ingest_demand(path: Path, db: str, as_json: bool, fmt: str | None, replace: bool, plausible_factor: float,
                   batch_size: int) -> None:
    """`fleet ingest --demand FILE`: the file opened and checked as a telemetry file is, before the store is opened,
    then judged and stored record by record (`fleet.ingest.demand`)."""
    from fleet.ingest import IngestSettings
    from fleet.ingest.demand import file_source, ingest_demand
    from fleet.ingest.formats import detect_format

    if fmt is not None:
        detect_format(path, fmt)  # an unknown format name is its error
    source = file_source(fmt or path.suffix.lstrip(".").lower(), str(path))
    parsed = source.open(path, str(path))  # a bad file fails here, before the store is touched
    settings = IngestSettings(now_ts=int(time.time()), plausible_factor=plausible_factor, batch_records=batch_size)
    report = ingest_demand(_open(db, "a real pool's measured demand"), parsed, settings, source.part, replace)
    _print_report(report.as_json(), as_json)
    raise typer.Exit(ingest_status([report]))


def _pull(prometheus: str, query, start, end, step, card_label, busy_query, auth):
    """The range query (and its busy query) pulled as the service's Prometheus source pulls, by the source the
    registry finds for the flags' keys (`fleet.ingest.sources`; the default queries follow the card labels), parsed
    as a file would be."""
    from fleet.ingest.prometheus import DEFAULT_CARD_LABEL, busy_query as default_busy_query, card_labels, rate_query
    from fleet.ingest.sources import source_for

    labels = card_labels(card_label or [DEFAULT_CARD_LABEL])  # a bad label is a ConfigError naming it
    label = labels[0] if len(labels) == 1 else labels
    keys = {"prometheus_url": prometheus, "query": query or rate_query(label), "card_label": label, "auth": auth,
            "busy_query": default_busy_query(label) if busy_query is None else busy_query}
    source = source_for(keys, "fleet ingest --prometheus")
    t_end = end if end is not None else time.time()
    t_start = start if start is not None else t_end - HOUR_S
    return source.pull_range(t_start, t_end, step)


INGEST_SOME_QUARANTINED = 3
"""`fleet ingest`'s status when some records were quarantined and the rest stored: not a failure, but a script
must be able to tell it from a clean ingest without parsing the report."""


def ingest_status(reports) -> int:
    """0 when no record was quarantined, 3 when some were, 1 when records were read and every one was quarantined
    (nothing stored, none already there): the ingest then did nothing a caller asked for."""
    quarantined = sum(r.quarantined for r in reports)
    kept = sum(r.stored + r.duplicates for r in reports)
    if not quarantined:
        return 0
    if kept:
        return INGEST_SOME_QUARANTINED
    names = ", ".join(r.source for r in reports)
    err_console.print(f"fleet: error: {names}: every record was quarantined ({quarantined:,}); nothing stored",
                      markup=False, highlight=False, soft_wrap=True)
    return 1


def _credentials(bearer_token_file, bearer_token_env, username, password_file, password_env):
    """The pull's `Credentials` from the flags, or None when none is given; a bad combination is its ConfigError."""
    from pydantic import ValidationError

    from fleet.core.errors import ConfigError
    from fleet.credentials import Credentials

    fields = {"bearer_token_file": bearer_token_file, "bearer_token_env": bearer_token_env, "username": username,
              "password_file": password_file, "password_env": password_env}
    fields = {k: str(v) for k, v in fields.items() if v is not None}
    if not fields:
        return None
    try:
        return Credentials(**fields)
    except ValidationError as err:
        reason = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
        raise ConfigError(f"credentials ({', '.join('--' + k.replace('_', '-') for k in fields)}): {reason}") from None


def db_upgrade_cmd(
    db: DbOption = DEFAULT_URL,
    revision: Annotated[str, typer.Option("--revision", help="Target revision.")] = "head",
) -> None:
    """Bring the database to the newest schema (Alembic's upgrade), keeping its data."""
    from storage import open_store
    from storage.db import shown_url as shown

    store = open_store(db, create=True, any_revision=True)
    try:
        before = store.migrations.revision()
        after = store.migrations.upgrade(revision)
    finally:
        store.close()
    shown_url = shown(db)  # the URL as given, password masked
    console.print(f"{shown_url}: schema {before or 'empty'} -> {after}" if before != after else f"{shown_url}: schema already at {after}",
                  markup=False, highlight=False, soft_wrap=True)


def db_current_cmd(db: DbOption = DEFAULT_URL) -> None:
    """Print the database's schema revision (Alembic's current); a database with no store there is an error, and nothing is created."""
    from storage import open_store

    store = open_store(db, any_revision=True)  # a StoreError naming the URL (exit 2) when there is no store, never a new file
    try:
        rev, head = store.migrations.revision(), store.migrations.head()
    finally:
        store.close()
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

    from storage import open_store
    from storage.db import shown_url as shown

    store = open_store(db)  # a store that is not there, or at an older schema, is an error, and none is made
    try:
        pruned = store.telemetry.prune_raw(int(time.time()) - raw_older_than * DAY_S)
    finally:
        store.close()
    shown_url = shown(db)  # the URL as given, password masked
    before = datetime.fromtimestamp(pruned.before_ts, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    if as_json:
        typer.echo(json.dumps({"samples": pruned.samples, "cards": pruned.cards, "before_ts": pruned.before_ts, "before": before}))
        return
    console.print(f"{shown_url}: deleted {pruned.samples:,} raw samples of {pruned.cards:,} cards from hours before {before}; "
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
