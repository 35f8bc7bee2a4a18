"""Retention soak: a pool at one sample a minute through a simulated month, raw samples pruned once a day.

Without pruning a store grows by every sample it is sent (1,000 cards at one a minute are 1.44 million rows a
day); the prune (`SqlRepository.prune_raw`, the same call as `fleet db prune` and the service's prune job) keeps
only the last `--prune-after-days` of raw samples, and the hourly rollups the service reads stay. This soak
drives a real-pool `Service` on a stepped clock, hour by hour: the hour's minute samples in through
`fleet.ingest.ingest_parsed` (one transaction per batch, as the drop folder and the Prometheus pull store
them), then the tick (the score and decide jobs) and the billing job, and at each day's end a prune of the
raw samples older than the age. At each simulated week (and at the end) it prints the raw sample rows, the
rollup rows, the store's size on disk (SQLite file + WAL), the median tick and ingest of the week's hours,
the day's prune, and the process's peak and current resident memory. The claim to see: from the second
week on, the store's size and the tick stay flat with pruning, and grow without it (`--no-prune`).

    python bench/soak_retention.py                                  # 1,000 cards, 30 days, 60 samples an hour
    python bench/soak_retention.py --cards 200 --days 14 --no-prune
    python bench/soak_retention.py --db /tmp/soak.db                # keep the store (default: a temporary one)

Not part of the test suite at full scale (it takes tens of minutes); tests/test_bench_soak_smoke.py runs it
with a few cards over two days.
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fleet.service.simulation import SetClock as SteppedClock  # noqa: E402
from fleet.core.units import HOUR_S

DAY_S = 86_400
MONTH_START_TS = 1_767_225_600  # 2026-01-01T00:00Z
RATED_TPS = 6000.0
RENT_USD_PER_MONTH = 2690.0
SEED = 11


@dataclass
class Week:
    """The figures printed at the end of a simulated week (or of the soak's last, shorter one)."""

    day: int
    raw_rows: int
    rollup_rows: int
    store_mb: float
    tick_median_ms: float
    ingest_median_ms: float
    bill_median_ms: float
    prune_s: float | None  # the last prune of the week (None: no prune ran)
    wall_s: float  # wall time since the soak started
    peak_rss_mb: float
    rss_mb: float


@dataclass
class Soak:
    cards: int
    days: int
    samples_per_hour: int
    prune_after_days: float | None
    db: Path
    weeks: list[Week] = field(default_factory=list)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def rss_mb() -> float:
    import os

    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def store_mb(db: Path) -> float:
    wal = db.with_name(db.name + "-wal")
    return (db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)) / 2**20


def row_counts(db: Path) -> tuple[int, int]:
    """(raw sample rows, rollup rows), read through a separate read-only connection (fixed SQL, no input)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        raw = con.execute("SELECT COUNT(*) FROM telemetry_samples").fetchone()[0]
        rollups = con.execute("SELECT COUNT(*) FROM hourly_rollups").fetchone()[0]
    finally:
        con.close()
    return int(raw), int(rollups)


def make_service(db: Path, cards: int, days: int):
    """A real-pool service of `cards` flagship cards on a stepped clock, the month long enough for the soak."""
    from fleet.core.scenario import CardClass, Demand, Eviction, Policy, Pool
    from fleet.service.config import MonthSettings, ServiceConfig
    from fleet.service.service import Service
    from storage import ClassSpec, open_repository

    repo = open_repository(f"sqlite:///{db}")
    repo.declare_classes([ClassSpec("flagship", RATED_TPS, RENT_USD_PER_MONTH)])
    repo.declare_cards({f"gpu-{i:05d}": "flagship" for i in range(cards)}, MONTH_START_TS)
    cfg = ServiceConfig(
        month=MonthSettings(start=datetime.fromtimestamp(MONTH_START_TS, UTC), hours=max(720, days * 24)),
        pool=Pool(classes=(CardClass(name="flagship", rated_tps=RATED_TPS, rent_usd_per_month=RENT_USD_PER_MONTH),)),
        policy=Policy(card_class="flagship", window="day", mode="steady", headroom=1.05,
                      eviction=Eviction(rule="below-median", window="hour", cadence_hours=24, share=0.1,
                                        rules={"below-median": {"fraction": 0.8}})),
        demand=Demand(shape="diurnal", avg_tps=RATED_TPS * cards * 0.5, peak_to_avg=1.6),
    )
    clock = SteppedClock(MONTH_START_TS)
    return Service(cfg, repo, clock), clock


class Feed:
    """Each card's minute samples: a level drawn once (a few slow cards among them), noise on every sample."""

    def __init__(self, cards: int, samples_per_hour: int, seed: int = SEED):
        import pyarrow as pa

        self.rng = np.random.default_rng(seed)
        level = RATED_TPS * 0.85 * np.exp(self.rng.normal(0.0, 0.08, cards))
        level[self.rng.random(cards) < 0.03] *= 0.6  # the cards the eviction rule is there to find
        self.level = level
        self.per_hour = samples_per_hour
        step_s = HOUR_S // samples_per_hour
        self.offsets = np.arange(samples_per_hour, dtype=np.int64) * step_s
        keys = pa.array([f"gpu-{i:05d}" for i in range(cards)], pa.string())
        self.card_col = keys.take(pa.array(np.repeat(np.arange(cards), samples_per_hour)))

    def hour(self, hour_ts: int):
        """The hour's samples as a source held in memory (card by card, minute by minute)."""
        import pyarrow as pa

        from fleet.ingest import Parsed

        n = self.level.size * self.per_hour
        ts = np.tile(hour_ts + self.offsets, self.level.size)
        tps = np.repeat(self.level, self.per_hour) * (1.0 + self.rng.normal(0.0, 0.05, n))
        busy = np.clip(self.rng.normal(0.7, 0.1, n), 0.0, 1.0)
        columns = {"card_id": self.card_col, "ts": pa.array(ts, pa.int64()),
                   "tokens_per_s": pa.array(np.maximum(tps, 0.0), pa.float64()), "busy_fraction": pa.array(busy, pa.float64())}
        return Parsed.of_columns(f"soak:{hour_ts}", f"soak:{hour_ts}", columns, np.arange(n, dtype=np.int64))


def soak(cards: int = 1000, days: int = 30, samples_per_hour: int = 60, prune_after_days: float | None = 7.0,
         db: Path | None = None, week_days: int = 7, bill_every_hours: int = 24, out=print) -> Soak:
    """Run the soak (see the module's docstring) on the store `db` (a temporary one, deleted after, if None);
    `prune_after_days=None` never prunes. Prints a line a week."""
    if HOUR_S % samples_per_hour:
        raise SystemExit(f"--samples-per-hour {samples_per_hour}: must divide 3600")
    if db is not None:
        return _soak(cards, days, samples_per_hour, prune_after_days, db, week_days, bill_every_hours, out)
    with tempfile.TemporaryDirectory(prefix="fleet-soak-") as tmp:
        return _soak(cards, days, samples_per_hour, prune_after_days, Path(tmp) / "soak.db", week_days, bill_every_hours, out)


def _soak(cards: int, days: int, samples_per_hour: int, prune_after_days: float | None, db: Path, week_days: int,
          bill_every_hours: int, out) -> Soak:
    from fleet.ingest import ingest_parsed

    start = time.perf_counter()
    svc, clock = make_service(db, cards, days)
    feed = Feed(cards, samples_per_hour)
    result = Soak(cards, days, samples_per_hour, prune_after_days, db)
    ticks: list[float] = []
    ingests: list[float] = []
    bills: list[float] = []
    prune_s: float | None = None
    out(header(result))
    for hour in range(days * 24):
        hour_ts = MONTH_START_TS + hour * HOUR_S
        clock.t = hour_ts + HOUR_S + svc.cfg.schedule.settle_s  # the hour has ended and settled
        t0 = time.perf_counter()
        report = ingest_parsed(svc.telemetry, feed.hour(hour_ts), svc.ingest.settings())
        ingests.append(time.perf_counter() - t0)
        if report.stored != cards * samples_per_hour:
            raise SystemExit(f"soak: hour {hour} stored {report.stored} of {cards * samples_per_hour} samples ({report.reasons})")
        t0 = time.perf_counter()
        svc.score_job()
        svc.decide_job()
        ticks.append(time.perf_counter() - t0)
        if (hour + 1) % bill_every_hours == 0:
            t0 = time.perf_counter()
            svc.billing_job()
            bills.append(time.perf_counter() - t0)
        day_done = (hour + 1) % 24 == 0
        if day_done and prune_after_days is not None:
            t0 = time.perf_counter()
            svc.telemetry.prune_raw(int(clock.t - prune_after_days * DAY_S))
            prune_s = time.perf_counter() - t0
        day = (hour + 1) // 24
        if day_done and (day % week_days == 0 or day == days):
            raw, rollups = row_counts(db)
            week = Week(day, raw, rollups, store_mb(db), 1e3 * statistics.median(ticks), 1e3 * statistics.median(ingests),
                        1e3 * statistics.median(bills) if bills else float("nan"), prune_s, time.perf_counter() - start,
                        peak_rss_mb(), rss_mb())
            result.weeks.append(week)
            out(line(week))
            ticks, ingests, bills = [], [], []
    svc.telemetry.engine.dispose()
    return result


def header(s: Soak) -> str:
    prune = f"raw samples pruned daily after {s.prune_after_days:g} days" if s.prune_after_days is not None else "no pruning"
    title = f"# soak: {s.cards:,} cards x {s.samples_per_hour} samples/h x {s.days} days, {prune}; store {s.db}"
    cols = f"{'day':>4} {'raw rows':>12} {'rollups':>9} {'store MB':>9} {'tick ms':>8} {'ingest ms':>9} {'bill ms':>8} {'prune s':>8} {'wall s':>7} {'peak RSS MB':>11} {'RSS MB':>7}"
    return f"{title}\n{cols}"


def line(w: Week) -> str:
    prune = f"{w.prune_s:8.2f}" if w.prune_s is not None else f"{'-':>8}"
    return (f"{w.day:>4} {w.raw_rows:>12,} {w.rollup_rows:>9,} {w.store_mb:>9.1f} {w.tick_median_ms:>8.0f} {w.ingest_median_ms:>9.0f} "
            f"{w.bill_median_ms:>8.0f} {prune} {w.wall_s:>7.0f} {w.peak_rss_mb:>11.0f} {w.rss_mb:>7.0f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cards", type=int, default=1000)
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--samples-per-hour", type=int, default=60)
    p.add_argument("--prune-after-days", type=float, default=7.0, help="the age of the raw samples pruned each day (default 7)")
    p.add_argument("--no-prune", action="store_true", help="never prune: the store keeps every raw sample")
    p.add_argument("--week-days", type=int, default=7, help="print the figures every this many simulated days")
    p.add_argument("--bill-every-hours", type=int, default=24,
                   help="run the billing job every this many simulated hours (default 24: it catches up on the day's hours)")
    p.add_argument("--db", type=Path, help="the SQLite file to build and keep (must not exist; default: a temporary one)")
    a = p.parse_args(argv)
    if min(a.cards, a.days, a.samples_per_hour, a.week_days, a.bill_every_hours) < 1:
        p.error("--cards, --days, --samples-per-hour, --week-days and --bill-every-hours must be at least 1")
    if a.db is not None and a.db.exists():
        p.error(f"--db {a.db}: exists; the soak builds a new store")
    soak(a.cards, a.days, a.samples_per_hour, None if a.no_prune else a.prune_after_days, a.db, a.week_days, a.bill_every_hours)
    return 0


if __name__ == "__main__":
    sys.exit(main())
