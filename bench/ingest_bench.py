"""Ingest benchmark and the 1,000,000-sample acceptance: one malformed record in every hundred.

Prints: the time to open and check the file (its start, then a digest pass), the
ingest rate into a fresh SQLite file (the file read, judged and stored batch by
batch), the counts and reasons (checked against what the file holds), the rate of
a second ingest (everything a duplicate), and for comparison plain sqlite3
`executemany` of the same valid rows into a table of the same shape (the floor any
Python ingest pays for binding rows).

    python bench/ingest_bench.py [SAMPLES] [--batch N]
    python bench/ingest_bench.py 300000 --parse-only   # the CSV reader alone: open, check and read every record

Peak memory at 10,000,000 rows: bench/ingest_memory.py.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.telemetry_data import write_csv  # noqa: E402

from fleet.ingest import IngestSettings, ingest_parsed, read_file  # noqa: E402
from storage import ClassSpec, open_repository  # noqa: E402


def plain_executemany(path: Path, rows: list[tuple]) -> float:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute(
        "CREATE TABLE s (card_id INTEGER NOT NULL, ts INTEGER NOT NULL, tokens_per_s REAL NOT NULL, busy_fraction REAL, "
        "batch_id INTEGER NOT NULL, PRIMARY KEY (card_id, ts)) WITHOUT ROWID"
    )
    t, c = time.perf_counter(), time.process_time()
    con.execute("BEGIN")
    con.executemany("INSERT INTO s VALUES (?, ?, ?, ?, ?) ON CONFLICT (card_id, ts) DO NOTHING", rows)
    con.execute("COMMIT")
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    con.close()
    return seconds, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("samples", type=int, nargs="?", default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--parse-only", action="store_true", help="time the reader alone (median of 5), nothing stored")
    args = ap.parse_args()
    n = args.samples
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "telemetry.csv"
        expected = write_csv(src, n, cards=1000, bad_every=100)
        size_mb = src.stat().st_size / 1e6
        if args.parse_only:
            times = []
            for _ in range(5):
                t = time.perf_counter()
                records = sum(b.n_records for b in read_file(src).batches(args.batch))
                times.append(time.perf_counter() - t)
            times.sort()
            print(f"read {records:,} records ({size_mb:.1f} MB) in {times[2]:.3f} s median of 5 (fastest {times[0]:.3f} s): "
                  f"{records / times[2]:,.0f} records/s")
            return
        repo = open_repository(f"sqlite:///{Path(tmp) / 'fleet.db'}")
        repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
        s = IngestSettings(now_ts=int(time.time()), default_class="flagship", batch_records=args.batch)

        t, c = time.perf_counter(), time.process_time()
        parsed = read_file(src)
        parse_s = time.perf_counter() - t
        t = time.perf_counter()
        first = ingest_parsed(repo, parsed, s)
        store_s = time.perf_counter() - t
        cpu_s = time.process_time() - c
        total = parse_s + store_s
        ok = (
            first.read == n == first.stored + first.duplicates + first.quarantined
            and first.quarantined == n // 100
            and first.reasons == expected
            and repo.sample_count() == first.stored == n - n // 100
        )
        print(f"file: {n:,} records, {size_mb:.1f} MB, 1 malformed in 100")
        print(f"first ingest: open and check {parse_s:.2f} s + read/judge/store {store_s:.2f} s = {total:.2f} s -> {n / total:,.0f} records/s")
        print(f"  CPU time {cpu_s:.2f} s -> {n / cpu_s:,.0f} records per CPU second (wall and CPU differ on a loaded machine)")
        print(f"  read {first.read:,} = stored {first.stored:,} + duplicates {first.duplicates:,} + quarantined {first.quarantined:,}")
        print(f"  reasons {dict(sorted(first.reasons.items()))}")
        print(f"  counts add up and every bad record has its expected reason: {ok}")

        t = time.perf_counter()
        again = ingest_parsed(repo, read_file(src), s)
        again_s = time.perf_counter() - t
        same = again.stored == 0 and again.duplicates == first.stored and repo.sample_count() == first.stored
        print(f"second ingest: {again_s:.2f} s -> {n / again_s:,.0f} records/s; stored {again.stored:,}, duplicates {again.duplicates:,}, "
              f"quarantined {again.quarantined:,}; nothing new: {same}")

        card = np.arange(n) % 1000 + 1
        ts = 1_735_689_600 + (np.arange(n) // 1000) * 60
        tps = np.random.default_rng(0).normal(6000, 1500, n)
        keep = (np.arange(n) + 1) % 100 != 0
        order = np.lexsort((ts[keep], card[keep]))
        rows = list(zip(card[keep][order].tolist(), ts[keep][order].tolist(), tps[keep][order].tolist(), [None] * int(keep.sum()), [1] * int(keep.sum())))
        plain_s, plain_cpu = plain_executemany(Path(tmp) / "plain.db", rows)
        print(f"plain sqlite3 executemany of the {len(rows):,} valid rows (prebuilt tuples, nothing parsed or judged): "
              f"{plain_s:.2f} s -> {len(rows) / plain_s:,.0f} rows/s; CPU {plain_cpu:.2f} s -> {len(rows) / plain_cpu:,.0f} rows per CPU second")
        print(f"fleet ingest end to end (parse + judge + store + rollups) vs that floor: {plain_s / total:.2f}x its speed in wall time, "
              f"{plain_cpu / cpu_s:.2f}x in CPU time")
        if not (ok and same):
            sys.exit(1)


if __name__ == "__main__":
    main()
