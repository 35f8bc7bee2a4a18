"""Peak memory of `fleet ingest`: a CSV of ROWS records (one malformed in a hundred) into a fresh SQLite file.

The file is written first (in bounded memory); then a fresh child process ingests it
through the same path as `fleet ingest FILE` (open and check the file, then store it
batch by batch) and reports its peak resident memory (`ru_maxrss`), beside the
resident memory the imports alone take. The target is a peak under 500 MB at
10,000,000 rows: memory must not grow with the file.

    python bench/ingest_memory.py [--rows 10000000] [--batch 100000] [--keep DIR]

Not part of the test suite (10,000,000 rows take minutes); tests/ingest runs it at a tiny size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_MB = 500


def child(path: str, db: str, batch: int) -> None:
    import resource

    from fleet.ingest import IngestSettings, ingest_parsed, read_file
    from storage import ClassSpec, open_repository

    imported_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    repo = open_repository(f"sqlite:///{db}")
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    t = time.perf_counter()
    parsed = read_file(path)
    report = ingest_parsed(repo, parsed, IngestSettings(now_ts=int(time.time()), default_class="flagship", batch_records=batch))
    seconds = time.perf_counter() - t
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({**report.as_json(), "seconds": seconds, "imports_mb": imported_mb, "peak_mb": peak_mb}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--keep", type=Path, help="write the file and database here (default: a temporary folder)")
    ap.add_argument("--child", nargs=2, metavar=("CSV", "DB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.batch)
        return
    sys.path.insert(0, str(ROOT))
    from bench.telemetry_data import write_csv

    with tempfile.TemporaryDirectory(prefix="fleet-mem-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        src, db = folder / "telemetry.csv", folder / "fleet.db"
        db.unlink(missing_ok=True)
        t = time.perf_counter()
        expected = write_csv(src, args.rows, cards=1000, bad_every=100)
        print(f"file: {args.rows:,} records, {src.stat().st_size / 1e6:,.0f} MB, written in {time.perf_counter() - t:.0f} s")
        proc = subprocess.run([sys.executable, __file__, "--batch", str(args.batch), "--child", str(src), str(db)],
                              capture_output=True, text=True, cwd=ROOT)
        if proc.returncode:
            raise SystemExit(f"ingest failed:\n{proc.stderr[-3000:]}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        ok = r["read"] == args.rows == r["stored"] + r["duplicates"] + r["quarantined"] and r["reasons"] == expected
        print(f"ingest: {r['read']:,} read = stored {r['stored']:,} + duplicates {r['duplicates']:,} + quarantined {r['quarantined']:,} "
              f"in {r['seconds']:.0f} s ({r['read'] / r['seconds']:,.0f} records/s); counts and reasons as written: {ok}")
        met = "met" if r["peak_mb"] < TARGET_MB else "missed"
        print(f"peak resident memory: {r['peak_mb']:,.0f} MB for {args.rows:,} rows (imports alone {r['imports_mb']:,.0f} MB); "
              f"target < {TARGET_MB} MB: {met}")
        if not ok:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
