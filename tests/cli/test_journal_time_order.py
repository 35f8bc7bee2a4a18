"""`fleet journal` in time order, newest first, whatever order the rows were written in: an action set aside
late (an `act-expired` stamped when it expired) sits above the hours decided before it, never between them.

Before: rows came in id order, so a record written after a catch-up but stamped later sat between older hours."""

from __future__ import annotations

import json
import subprocess
import sys

from fleet.ingest.pool import declare_pool
from storage import open_store
from storage.records import AddRecord, ReleaseRecord, SetAsideRecord
from storage.repository import ClassSpec
from storage.service_store import JournalEntry
from storage.values import Kind

T0 = 1_767_225_600
HOUR_S = 3600


def _journal_written_out_of_time_order(url: str) -> None:
    """Hour 0 releases gpu-a; the release expires at hour 5, and that record is written before hours 1 and 2."""
    store = open_store(url, create=True)
    try:
        declare_pool(store.telemetry, [ClassSpec("flagship", 6000.0, 2690.0)], {"gpu-a": "flagship", "gpu-b": "flagship"}, 0)
        j = store.journal
        j.journal_hour(T0, [JournalEntry(f"{T0}:release:gpu-a", T0, Kind.RELEASE, "released", "gpu-a",
                                         detail=ReleaseRecord(0, 5000.0, "day").to_detail())], {}, [], [])
        (rel,) = j.decisions(kinds=[Kind.RELEASE])
        late = T0 + 5 * HOUR_S
        j.set_aside(JournalEntry(f"{rel.key}:act-expired", late, Kind.ACT_EXPIRED, "expired", "gpu-a",
                                 detail=SetAsideRecord(rel.key, rel.id, "release", T0, 0, float(late), "expired",
                                                       "too late").to_detail(), acted=True))
        for h in (1, 2):
            ts = T0 + h * HOUR_S
            j.journal_hour(ts, [JournalEntry(f"{ts}:add:gpu-b", ts, Kind.ADD, "added", "gpu-b",
                                             detail=AddRecord(h, 6000.0, "day", 2.0).to_detail())], {}, [], [])
    finally:
        store.close()


def test_the_store_gives_the_newest_rows_by_time(store_url):
    _journal_written_out_of_time_order(store_url)
    store = open_store(store_url, read_only=True)
    try:
        rows = store.journal.decisions(newest_first=True)
        assert [r.ts for r in rows] == sorted((r.ts for r in rows), reverse=True)
        assert [r.kind for r in store.journal.decisions(newest_first=True, limit=1)] == [Kind.ACT_EXPIRED]
    finally:
        store.close()


def test_fleet_journal_lists_newest_first_by_time(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    _journal_written_out_of_time_order(url)
    p = subprocess.run([sys.executable, "-m", "fleet.cli.app", "journal", "--db", url, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    events = json.loads(p.stdout)
    assert [e["kind"] for e in events] == ["act-expired", "add", "add", "release"]
    assert [e["ts"] for e in events] == sorted((e["ts"] for e in events), reverse=True)
