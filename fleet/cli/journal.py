"""`fleet journal`: the service's decisions as events, newest first, each with its reason and whether it was acted.

The store is opened with `storage.open_store` as a reader: a mistyped path is an
error, never a new empty store.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timezone
from typing import Annotated, Optional

import typer

from storage import DEFAULT_URL
from fleet.core.units import HOUR_S, NO_END_TS
from storage.values import ACTION_KINDS, EVENT_KINDS, SET_ASIDE_KINDS, Kind

RECORD_KINDS = EVENT_KINDS
DEFAULT_KINDS = ACTION_KINDS + SET_ASIDE_KINDS + RECORD_KINDS
KINDS = DEFAULT_KINDS + (Kind.SIZE, Kind.EVICTION_PASS)  # `size` and `eviction-pass` are the hour's records
_AGO = re.compile(r"^(\d+)\s*([hd])$")


def refuse_missing_sqlite_file(url: str) -> None:
    """A SQLite URL with no fleet store there is a `StoreError` naming it (password masked), found without writing
    anything (`storage.existing`'s rule); other databases are left to their server to refuse, when first used."""
    from storage.existing import existing_revision, sqlite_file

    if sqlite_file(url) is not None:  # None: another backend, or a bad URL (opening it says what is wrong)
        existing_revision(url)


def parse_since(text: str, now_ts: float) -> int:
    """`--since`: an ISO 8601 time (UTC unless it says otherwise), Unix seconds, or a span ago (`24h`, `7d`)."""
    from fleet.core.errors import ConfigError

    t = text.strip()
    ago = _AGO.match(t)
    if ago:
        return int(now_ts) - int(ago.group(1)) * (HOUR_S if ago.group(2) == "h" else 24 * HOUR_S)
    if t.isdigit():
        return int(t)
    try:
        when = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--since {text!r}: expected an ISO 8601 time (2026-11-02T06:00), Unix seconds, or a span ago (24h, 7d)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp())


def iso(ts: int | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


def event(row) -> dict:
    """One journal row as an event: when, what, which card, why, and whether (and when) it was carried out."""
    return {
        "id": row.id,
        "ts": row.ts,
        "time": iso(row.ts),
        "kind": row.kind,
        "key": row.key,
        "card": row.card_key,
        "reason": row.reason,
        "acted": row.acted_ts is not None and row.kind not in SET_ASIDE_KINDS + RECORD_KINDS,
        "acted_ts": None if row.kind in SET_ASIDE_KINDS + RECORD_KINDS else row.acted_ts,
        "detail": row.detail,  # the kind's record as stored (`storage.records`), exported untouched
    }


def mark_set_aside(store, events: list[dict]) -> None:
    """Give each unacted action that a set-aside record closes its `set_aside` kind, so it never reads "not yet"."""
    open_keys = {e["key"] for e in events if not e["acted"] and e["kind"] in ACTION_KINDS}
    if not open_keys:
        return
    from fleet.service.readmodel import closed_by

    closed = closed_by(store)
    for e in events:
        if e["key"] in open_keys and e["key"] in closed:
            e["set_aside"] = closed[e["key"]]


def journal_cmd(
    db: Annotated[str, typer.Option("--db", envvar="FLEET_DB", help="Database URL of the service's store.")] = DEFAULT_URL,
    card: Annotated[Optional[str], typer.Option("--card", help="Only this card's decisions.")] = None,
    kind: Annotated[Optional[list[str]], typer.Option("--kind", help="Only decisions of this kind (repeatable): evict, add, release, act-failed, act-expired, reconcile, retire; also size, eviction-pass. Default: all but size and eviction-pass.")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Only decisions at or after this time: ISO 8601 (UTC), Unix seconds, or a span ago (24h, 7d; in a simulated store, before its newest decision).")] = None,
    limit: Annotated[int, typer.Option("--limit", help="Show at most this many, the newest.", min=1)] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Print the events as a JSON list, newest first.")] = False,
) -> None:
    """The service's decisions as events, newest first (as `kubectl get events`), each with its reason and whether it was acted."""
    from rich.console import Console

    from fleet.core.errors import ConfigError
    from storage import open_store

    console = Console(width=None if sys.stdout.isatty() else 120)  # as the other commands print (fleet.cli.app)

    kinds = list(dict.fromkeys(kind)) if kind else list(DEFAULT_KINDS)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ConfigError(f"--kind {unknown[0]}: not a decision kind (one of {', '.join(KINDS)})")
    db_store = open_store(db, read_only=True)  # a reader: it never writes the store, which may be read-only
    try:
        _show(console, db_store, card, kinds, since, limit, as_json)
    finally:
        db_store.close()


def _show(console, db_store, card: str | None, kinds: list[str], since: str | None, limit: int, as_json: bool) -> None:
    import time

    store = db_store.journal
    since_ts = parse_since(since, store_now(db_store, time.time())) if since is not None else None
    events = [event(r) for r in store.decisions(card_key=card, kinds=kinds, since_ts=since_ts, limit=limit, newest_first=True)]
    mark_set_aside(store, events)
    if as_json:
        typer.echo(json.dumps(events, indent=2))
        return
    if not events:
        console.print("no decisions journaled" + (f" for card {card}" if card else "") + (f" since {iso(since_ts)}" if since_ts is not None else ""), highlight=False, markup=False, soft_wrap=True)
        return
    matched = len(events) if len(events) < limit else store.decision_total(card_key=card, kinds=kinds, since_ts=since_ts)
    _print_events(console, events, matched)


def store_now(db_store, wall_ts: float) -> float:
    """The time a span ago (`--since 7d`) counts back from: the wall clock for a real pool, and for a simulated
    store its own clock, the hour of its newest decision (a simulated month is years from the wall clock)."""
    identity = db_store.identity.read()
    if identity is None or identity.kind != "simulation":
        return wall_ts
    newest = db_store.journal.last_decided_ts(0, NO_END_TS)
    return wall_ts if newest is None else float(newest)


REASON_MIN_WIDTH = 40
"""Below this many columns for the reason, each event is stacked: its time, kind, card and acted on one line, its
reason under it at the whole width (as `compare` stacks a row that does not fit)."""


def _print_events(console, events: list[dict], matched: int) -> None:
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    from fleet.cli.words import grouped

    def acted(e: dict) -> str:
        if e["kind"] in SET_ASIDE_KINDS + RECORD_KINDS:
            return "-"
        if "set_aside" in e:
            return "set aside" if e["set_aside"] == Kind.ACT_FAILED else "expired"
        return iso(e["acted_ts"]) if e["acted"] else "not yet"

    rows = [(e["time"], e["kind"], e["card"] or "-", acted(e), grouped(e["reason"])) for e in events]
    heads = ("time", "kind", "card", "acted")
    fixed = sum(max(len(h), *(len(r[i]) for r in rows)) + 2 for i, h in enumerate(heads)) + 2
    if console.width - fixed < REASON_MIN_WIDTH:
        for r in rows:
            console.print(Text(f"{r[0]}  {r[1]}  {r[2]}  acted {r[3]}", style="bold"))
            console.print(Padding(Text(r[4]), (0, 0, 0, 4)))  # as written, never markup
    else:
        t = Table(*heads, "reason", box=None, padding=(0, 1))
        t.columns[-1].overflow = "fold"  # a long reason wraps; the figures in it are never cut
        for r in rows:
            t.add_row(r[0], r[1], Text(r[2]), r[3], Text(r[4]))  # as written, never markup
        console.print(t)
    if matched > len(events):
        console.print(f"  the newest {len(events)} of {matched} decisions; --limit shows more", highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("journal")(journal_cmd)
