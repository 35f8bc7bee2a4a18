"""What tests read back from the store's tables directly: the ingest runs and the quarantine.

`fleet` itself never reads these rows back (the service's metrics sum them through
`ServiceStore.ingest_totals` and `quarantine_reasons`); users read them with SQL from
`ingest_runs` and `quarantined_input`, as docs/store.md says, and so do the tests.
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd
from sqlalchemy import Engine, text


class IngestRun(NamedTuple):
    source: str
    read: int
    stored: int
    duplicates: int
    quarantined: int
    finished_ts: int | None


def ingest_runs(engine: Engine) -> list[IngestRun]:
    """Every ingest run, oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT source, read, stored, duplicates, quarantined, finished_ts FROM ingest_runs ORDER BY id")
        ).all()
    return [IngestRun(*r) for r in rows]


def quarantined(engine: Engine) -> pd.DataFrame:
    """The quarantine, oldest first: source, record number, raw text, reason."""
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT source, record_no, raw_text, reason FROM quarantined_input ORDER BY id")).all()
    return pd.DataFrame([tuple(r) for r in rows], columns=["source", "record_no", "raw_text", "reason"])
