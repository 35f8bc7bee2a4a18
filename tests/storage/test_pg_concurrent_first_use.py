"""Concurrent first use of a new PostgreSQL store: 8 processes opening one brand-new database at once (7 `fleet
ingest`, 1 `fleet db upgrade`) all succeed, and their counts add up.

As in the SQLite test beside it, the processes are forked level and released together at a barrier; no sleep
synchronises anything, and the outcome does not depend on who takes the migration lock first.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.storage.test_concurrent_first_use import _child, _telemetry, _warm_imports

PROCESSES = 8
ROUNDS = 3


def test_eight_processes_opening_a_new_postgresql_store_at_once_all_succeed(pg_server, tmp_path):
    if pg_server is None:
        pytest.skip("PostgreSQL: no server (FLEET_TEST_PG_URL or --pg-url)")
    _warm_imports()
    ctx = multiprocessing.get_context("fork")
    failures = []
    for r in range(ROUNDS):
        url = pg_server.create(with_schema=False)
        try:
            barrier = ctx.Barrier(PROCESSES + 1)
            procs, expected = [], {}
            for i in range(PROCESSES):
                out = str(tmp_path / f"round-{r}-{i}.out")
                if i < PROCESSES - 1:
                    src = tmp_path / f"round-{r}-{i}.csv"
                    expected[out] = _telemetry(src, i)
                    argv = ["ingest", str(src), "--db", url, "--json", "--batch-size", "5"]
                else:
                    argv = ["db", "upgrade", "--db", url]
                p = ctx.Process(target=_child, args=(argv, barrier, out))
                p.start()
                procs.append((p, out))
            barrier.wait(timeout=120)
            for p, out in procs:
                p.join(180)
                err = Path(out + ".err").read_text()
                if p.exitcode != 0 or err:
                    failures.append(f"round {r}, {Path(out).name}: status {p.exitcode}: {err.strip()[-300:]}")
                elif out in expected:
                    got = json.loads(Path(out).read_text())
                    assert (got["read"], got["stored"], got["quarantined"]) == (expected[out], expected[out], 0)
            if not failures:
                engine = create_engine(url, poolclass=NullPool)
                with engine.connect() as conn:
                    assert conn.execute(text("SELECT COUNT(*) FROM telemetry_samples")).scalar_one() == sum(expected.values())
                    assert conn.execute(text("SELECT COUNT(*) FROM alembic_version")).scalar_one() == 1
                engine.dispose()
        finally:
            pg_server.drop(url)
    assert failures == []
