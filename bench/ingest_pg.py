"""PostgreSQL ingest beside a plain COPY of the same rows into the same table.

Writes a CSV of SAMPLES records (one malformed in every hundred, as bench/ingest_bench.py), then, RUNS times
each, in a new database at the newest schema:
- `fleet`'s ingest of the file (read, judged and stored batch by batch: COPY into a staging table, one insert that
  drops duplicates, the hourly rollups, the run's counts), and
- a plain `COPY telemetry_samples ... FROM STDIN` of the file's valid rows (psycopg's `write_row`, one call a row),
  into the same table of a store that already has the cards and a batch to point at.
Prints the medians side by side and the ratio of the rates (ingest / plain COPY).

    python bench/ingest_pg.py --db postgresql+psycopg://fleet:SECRET@127.0.0.1:5432/fleet [SAMPLES] [--runs 3]

The URL (or FLEET_TEST_PG_URL) names a server whose user may create databases; the benchmark creates and drops
its own. No password is printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.telemetry_data import write_csv  # noqa: E402

from fleet.ingest import IngestSettings, ingest_file  # noqa: E402
from storage import ClassSpec, open_repository  # noqa: E402
from storage.db import shown_url  # noqa: E402

NOW = 1_767_225_600


class Server:
    def __init__(self, url: str):
        from sqlalchemy import create_engine
        from sqlalchemy.engine import make_url
        from sqlalchemy.pool import NullPool

        self.url = make_url(url)
        self.admin = create_engine(self.url, isolation_level="AUTOCOMMIT", poolclass=NullPool)

    def fresh(self, name: str) -> str:
        from sqlalchemy import text

        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = self.url.set(database=name).render_as_string(hide_password=False)
        open_repository(url).engine.dispose()  # the schema, untimed
        return url

    def drop(self, name: str) -> None:
        from sqlalchemy import text

        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def valid_rows(src: Path) -> list[tuple]:
    """The file's valid rows (every hundredth record is the malformed one) as (card id, ts, tokens/s); card gpu-00000
    is id 1 in a store that declares the cards in order."""
    rows = []
    with open(src, encoding="utf-8") as f:
        next(f)
        for i, line in enumerate(f, start=1):
            if i % 100:
                card, ts, tps = line.rstrip("\n").split(",")
                rows.append((int(card[4:]) + 1, int(ts), float(tps)))
    return rows


def time_ingest(server: Server, src: Path) -> tuple[float, int]:
    url = server.fresh("fleet_bench_ingest")
    repo = open_repository(url)
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    t = time.perf_counter()
    out = ingest_file(repo, src, IngestSettings(now_ts=NOW, default_class="flagship"))
    seconds = time.perf_counter() - t
    repo.engine.dispose()
    return seconds, out.stored


def _copy_store(server: Server, cards: int):
    url = server.fresh("fleet_bench_copy")
    repo = open_repository(url)
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    repo.declare_cards({f"gpu-{i:05d}": "flagship" for i in range(cards)}, NOW)
    run = repo.begin_run("plain", "x", NOW)
    with repo.engine.begin() as conn:
        batch = conn.exec_driver_sql(
            "INSERT INTO ingest_batches (run_id, part, first_record, read, stored, duplicates, quarantined, committed_ts) "
            "VALUES (%s, 0, 0, 0, 0, 0, 0, %s) RETURNING id", (run, NOW)).scalar_one()
    ids = {k: c.id for k, c in repo.cards().items()}
    assert all(ids[f"gpu-{i:05d}"] == i + 1 for i in range(cards))
    return repo, int(batch)


def time_plain_copy(server: Server, rows: list[tuple], cards: int) -> float:
    repo, batch = _copy_store(server, cards)
    raw = repo.engine.raw_connection()
    t = time.perf_counter()
    cur = raw.driver_connection.cursor()
    with cur.copy("COPY telemetry_samples (card_id, ts, tokens_per_s, busy_fraction, batch_id) FROM STDIN") as copy:
        for card, ts, tps in rows:
            copy.write_row((card, ts, tps, None, batch))
    raw.driver_connection.commit()
    seconds = time.perf_counter() - t
    raw.close()
    repo.engine.dispose()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("samples", type=int, nargs="?", default=1_000_000)
    ap.add_argument("--db", default=os.environ.get("FLEET_TEST_PG_URL"), help="a PostgreSQL server URL (default: $FLEET_TEST_PG_URL)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cards", type=int, default=1000)
    args = ap.parse_args()
    if not args.db:
        sys.exit("bench/ingest_pg.py: give --db URL (a PostgreSQL server) or set FLEET_TEST_PG_URL")
    server = Server(args.db)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "telemetry.csv"
        write_csv(src, args.samples, cards=args.cards, bad_every=100)
        rows = valid_rows(src)
        ingest_s, copy_s = [], []
        try:
            for _ in range(args.runs):
                seconds, stored = time_ingest(server, src)
                assert stored == len(rows), (stored, len(rows))
                ingest_s.append(seconds)
                copy_s.append(time_plain_copy(server, rows, args.cards))
        finally:
            server.drop("fleet_bench_ingest")
            server.drop("fleet_bench_copy")
    n, k = args.samples, len(rows)
    ing, cp = statistics.median(ingest_s), statistics.median(copy_s)
    print(f"PostgreSQL at {shown_url(args.db)}: {n:,} records ({k:,} valid), {args.cards:,} cards, medians of {args.runs} runs")
    print(f"  fleet ingest (read, judge, store)      {ing:7.2f} s  {n / ing:>10,.0f} records/s  ({k / ing:,.0f} rows stored/s)")
    print(f"  plain COPY of the valid rows           {cp:7.2f} s  {k / cp:>10,.0f} rows/s")
    print(f"  ratio ingest / plain COPY: {(k / ing) / (k / cp):.2f} (rows stored per second; the target is at least 0.5)")


if __name__ == "__main__":
    main()
