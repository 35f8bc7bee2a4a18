"""`fleet quarantine`: the records an ingest would not store, with their file, line, reason and raw text."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from storage import DEFAULT_URL


def quarantined_records(engine, reason: str | None = None, source: str | None = None, limit: int = 100) -> tuple[list[dict], int]:
    """Quarantined records, by file then line, and how many match in all. `reason` matches a reason or its family
    (`unparseable` matches `unparseable:tokens_per_s`); `source` a file as the ingest named it, or by its last parts.

    This reads the store's `quarantined_input` table through its model (SQLAlchemy binds every value); it belongs
    beside `ServiceStore.quarantine_reasons`, the store's other reader of that table."""
    from sqlalchemy import func, or_, select

    from storage.models import QuarantinedInput as Q

    where = []
    if reason is not None:
        where.append(or_(Q.reason == reason, Q.reason.like(_escaped(reason) + ":%", escape="\\")))
    if source is not None:
        where.append(or_(Q.source == source, Q.source.like("%/" + _escaped(source.lstrip("./")), escape="\\")))
    with engine.connect() as conn:
        total = int(conn.execute(select(func.count()).select_from(Q).where(*where)).scalar_one())
        rows = conn.execute(
            select(Q.source, Q.record_no, Q.reason, Q.raw_text).where(*where).order_by(Q.source, Q.record_no, Q.id).limit(int(limit))
        ).all()
    return [{"source": r[0], "line": int(r[1]), "reason": r[2], "raw_text": r[3]} for r in rows], total


def _escaped(text: str) -> str:
    """`text` as a LIKE pattern that matches only itself."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def quarantine_cmd(
    db: Annotated[str, typer.Option("--db", envvar="FLEET_DB", help="Database URL of the store.")] = DEFAULT_URL,
    reason: Annotated[Optional[str], typer.Option("--reason", help="Only records quarantined for this reason (or family: unparseable).")] = None,
    source: Annotated[Optional[str], typer.Option("--source", help="Only records from this file, as the ingest named it.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="Show at most this many.", min=1)] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Print the records as a JSON list.")] = False,
) -> None:
    """The bad records an ingest quarantined, with file, line (row in Parquet), reason and raw text."""
    from fleet.cli.app import console
    from fleet.cli.journal import existing_store

    records, total = quarantined_records(existing_store(db), reason, source, limit)
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
