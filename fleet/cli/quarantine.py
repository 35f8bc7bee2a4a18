"""`fleet quarantine`: the records an ingest would not store, with their file, line, reason and raw text."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from storage import DEFAULT_URL


def quarantine_cmd(
    db: Annotated[str, typer.Option("--db", envvar="FLEET_DB", help="Database URL of the store.")] = DEFAULT_URL,
    reason: Annotated[Optional[str], typer.Option("--reason", help="Only records quarantined for this reason (or family: unparseable).")] = None,
    source: Annotated[Optional[str], typer.Option("--source", help="Only records from this file, as the ingest named it.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="Show at most this many.", min=1)] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Print the records as a JSON list.")] = False,
) -> None:
    """The bad records an ingest quarantined, with file, line (row in Parquet), reason and raw text."""
    from fleet.cli.output import console
    from storage import open_store

    store = open_store(db, read_only=True)  # a reader: it never writes the store, which may be read-only
    try:
        records, total = store.telemetry.quarantined(reason, source, limit)
    finally:
        store.close()
    if as_json:
        typer.echo(json.dumps(records, indent=2))
        return
    if not records:
        console.print("no quarantined records" + (f" for reason {reason}" if reason else "") + (f" from {source}" if source else ""), highlight=False, markup=False, soft_wrap=True)
        return
    from rich.table import Table
    from rich.text import Text

    t = Table("file", "line", "reason", "raw text", box=None, padding=(0, 1))
    t.columns[0].overflow = t.columns[3].overflow = "fold"  # wrap, never cut
    for r in records:
        t.add_row(Text(r["source"]), str(r["line"]), Text(r["reason"]), Text(r["raw_text"]))  # as written, never markup
    console.print(t)
    if total > len(records):
        console.print(f"  {len(records)} of {total} quarantined records; --limit shows more", highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("quarantine")(quarantine_cmd)
