"""Concurrent first use of a new store: processes that open the same brand-new SQLite file at the same moment
all succeed, and their counts add up.

Each round forks its processes from this one (everything already imported, so they start level), holds them
at a barrier, and releases them together: each runs `fleet ingest` of its own small file through the same
`main` a user runs (one of them `fleet db upgrade` instead). No sleep synchronises anything; the outcome
does not depend on who wins which lock, only that nobody fails.
"""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import sys
from pathlib import Path

T0 = 1_735_689_600
INGESTERS = 4  # processes that ingest, plus one that upgrades the schema
ROUNDS = 6
CARDS, SAMPLES = 3, 4  # per process: its own cards, so every sample is new
BATCH = 5  # several transactions per process


def _child(argv: list[str], barrier, out: str) -> None:
    sys.stdout = open(out, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 - flushed by multiprocessing at exit
    sys.stderr = open(out + ".err", "w", buffering=1, encoding="utf-8")  # noqa: SIM115
    sys.argv = ["fleet", *argv]
    from fleet.cli.app import main

    barrier.wait(timeout=120)
    main()  # returns on success; an error exits with its status


def _telemetry(path: Path, proc: int) -> int:
    rows = [f"p{proc}-gpu-{c},{T0 + 60 * k},{5000 + c}\n" for c in range(CARDS) for k in range(SAMPLES)]
    path.write_text("card_id,ts,tokens_per_s\n" + "".join(rows))
    return len(rows)


def _warm_imports() -> None:
    """Import what a child would import lazily, so the children start the race level."""
    import alembic.command  # noqa: F401
    import alembic.runtime.migration  # noqa: F401
    import rich.progress  # noqa: F401

    import fleet.cli.app  # noqa: F401
    import fleet.ingest  # noqa: F401
    import storage.repository  # noqa: F401
    from storage.db import head_revision

    head_revision()


def test_processes_opening_a_new_store_at_once_all_succeed(tmp_path):
    _warm_imports()
    ctx = multiprocessing.get_context("fork")
    failures = []
    for r in range(ROUNDS):
        db = tmp_path / f"round-{r}.db"
        url = f"sqlite:///{db}"
        barrier = ctx.Barrier(INGESTERS + 2)
        procs, expected = [], {}
        for i in range(INGESTERS + 1):
            out = str(tmp_path / f"round-{r}-{i}.out")
            if i < INGESTERS:
                src = tmp_path / f"round-{r}-{i}.csv"
                expected[out] = _telemetry(src, i)
                argv = ["ingest", str(src), "--db", url, "--json", "--batch-size", str(BATCH)]
            else:
                argv = ["db", "upgrade", "--db", url]
            p = ctx.Process(target=_child, args=(argv, barrier, out))
            p.start()
            procs.append((p, out))
        barrier.wait(timeout=120)  # all of them are at the line: go
        for p, out in procs:
            p.join(120)
            err = Path(out + ".err").read_text()
            if p.exitcode != 0 or err:
                failures.append(f"round {r}, {Path(out).name}: status {p.exitcode}: {err.strip()}")
            elif out in expected:
                got = json.loads(Path(out).read_text())
                assert (got["read"], got["stored"], got["duplicates"], got["quarantined"]) == (expected[out], expected[out], 0, 0)
        if failures:
            continue
        con = sqlite3.connect(db)
        try:
            total = sum(expected.values())
            assert con.execute("SELECT COUNT(*) FROM telemetry_samples").fetchone()[0] == total
            assert con.execute("SELECT SUM(sample_count) FROM hourly_rollups").fetchone()[0] == total
            runs = con.execute("SELECT COUNT(*), SUM(stored) FROM ingest_runs WHERE finished_ts IS NOT NULL").fetchone()
            assert runs == (INGESTERS, total)
            assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            con.close()
    assert failures == []
