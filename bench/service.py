"""The service's benchmark: a pool's store set up once, its scheduler tick timed (or profiled), its `/metrics` scraped.

The store is built once per child: the pool's cards and hourly rollups written by
SQLite itself, then one service (all three windows scored) run hour by hour from
the month's start, each hour's actions carried out by the dry-run actuator in
their hour, as a running service does. Each timed service starts on a copy of
that file, runs one hour untimed (a running service has read its windows'
rollups before: the first hour after a start reads a week of them), and then its
timed hours, the last a decision hour. The tick timed is the service's own
`score_job` and `decide_job`, on the service's own store: only the way there is
short.

`run.py` loads this file from its own checkout and runs it on the code of the
checkout it measures (`side_by_side.py` sets `FLEET_BENCH_CODE`), so two commits
are timed by one procedure.
"""

from __future__ import annotations

import cProfile
import gzip
import io
import pstats
import shutil
import sqlite3
import statistics
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from fleet.core.units import HOUR_S

MONTH_START_TS = 1_767_225_600  # 2026-01-01T00:00Z
HISTORY_HOURS = 168
DECISION_HOUR = 24  # the eviction cadence is 24 h: hour 24 is the month's first decision hour
THREE_WINDOWS = {"hour": 1, "day": 24, "week": 168}  # the last marks an hour scored
TICK_FILL_HOURS = HISTORY_HOURS + DECISION_HOUR + 2
"""Rollups a tick-only child writes: the week before the month (the longest window) and the hours it ticks through."""
MOVES_PER_CARD_HOUR = 0.053
"""Cards added or released an hour, as a share of the pool: the replay of `run.py`'s bench month (10,000 cards, day
window, diurnal demand) moves 527 cards an hour. The benchmark's own service keeps every card warm (its rollups carry
no measured demand), so the journal a moving pool leaves is written for it (`journal_a_month`)."""
LATE_HOUR = 700
"""The month hour whose journal the late ticks carry: the month's moves through it, and the whole month before."""


class SteppedClock:
    """The service's clock, set by the benchmark."""

    def __init__(self, t: float):
        self.t = float(t)

    def now(self) -> float:
        return self.t

    def wall_seconds(self, clock_seconds: float) -> float:
        return clock_seconds


def fill_rollups(db: Path, cards: int, first_ts: int, hours: int) -> None:
    """Hourly rollups of every card for `hours` from `first_ts`, written by SQLite itself (set-up, not timed)."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("PRAGMA synchronous = OFF")  # set-up: a crash loses the bench's file, nothing else
    con.execute(
        """WITH RECURSIVE h(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM h WHERE x < ?)
        INSERT INTO hourly_rollups (card_id, hour_ts, sample_count, tokens_per_s_sum, busy_count, busy_fraction_sum, busy_tokens_per_s_sum)
        SELECT c.id, ? + h.x * 3600, 60,
               60 * (5000 + (c.id * 7919 % 2000) + (abs(random()) % 1000)), 0, 0, 0
        FROM cards AS c, h ORDER BY c.id, h.x""",
        (hours - 1, first_ts),
    )
    # Each card's last telemetry, kept on the card since revision 0008 (the end of its last rolled-up hour, as the
    # ingest of these rollups' samples would have left it); a store before it has no such column.
    columns = {row[1] for row in con.execute("PRAGMA table_info(cards)")}
    if "last_heard_ts" in columns:
        con.execute("UPDATE cards SET last_heard_ts = ?", (first_ts + hours * 3600 - 1,))
    if "last_served_ts" in columns:  # every rollup served tokens (revision 0009)
        con.execute("UPDATE cards SET last_served_ts = ?", (first_ts + hours * 3600 - 1,))
    con.commit()
    con.close()


def journal_a_month(db: Path, before_hour: int, seed: int = 7) -> int:
    """Write the journal a pool moving `MOVES_PER_CARD_HOUR` of its cards an hour leaves by month hour `LATE_HOUR`:
    the whole month before this one, and this month's moves through `LATE_HOUR`, dated in the hours before
    `before_hour` (so every read bounded by the month, or by the reconcile's 40-day lookback, sees as many rows as
    at `LATE_HOUR`). Adds and releases of random cards, each carried out a minute after it was decided. The service's
    own run set is left as it is: these are the rows a month leaves in the journal, not a change of the pool.
    Returns the rows written (set-up, not timed)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    con = sqlite3.connect(db)
    con.execute("PRAGMA synchronous = OFF")
    ids = np.array([r[0] for r in con.execute("SELECT id FROM cards ORDER BY id")])
    per_hour = max(1, round(ids.size * MOVES_PER_CARD_HOUR))
    last_month = MONTH_START_TS - 720 * HOUR_S
    stamps = np.concatenate([last_month + np.repeat(np.arange(720), per_hour) * HOUR_S,
                             MONTH_START_TS + (np.arange(LATE_HOUR * per_hour) * (before_hour * HOUR_S) // (LATE_HOUR * per_hour))])
    picked = rng.choice(ids, stamps.size)
    kinds = np.where(np.arange(stamps.size) % 2 == 0, "add", "release")
    con.executemany(
        "INSERT INTO decisions (ts, kind, card_id, reason, detail_json, decision_key, acted_ts) VALUES (?, ?, ?, '', '{}', ?, ?)",
        ((int(t), str(k), int(c), f"bench-move:{i}", int(t) + 60) for i, (t, k, c) in enumerate(zip(stamps, kinds, picked))),
    )
    con.commit()
    con.close()
    return int(stamps.size)


def bench_config(cards: int):
    """A flagship pool of `cards` sized every hour on its day window, below-median eviction every 24 hours."""
    from fleet.core.scenario import CardClass, Demand, Eviction, Policy, Pool
    from fleet.service.config import MonthSettings, ServiceConfig

    return ServiceConfig(
        month=MonthSettings(start=datetime.fromtimestamp(MONTH_START_TS, timezone.utc), hours=720),
        pool=Pool(classes=(CardClass(name="flagship", rated_tps=6000, rent_usd_per_month=2690),)),
        policy=Policy(card_class="flagship", window="day", mode="steady", headroom=1.05,
                      eviction=Eviction(rule="below-median", window="hour", cadence_hours=24, share=0.1,
                                        rules={"below-median": {"fraction": 0.8}})),
        demand=Demand(shape="diurnal", avg_tps=6000 * cards * 0.5, peak_to_avg=1.6),
    )


class BenchService:
    """A service on the store at `db`, its clock stepped by the benchmark."""

    def __init__(self, db: Path, cfg, windows: dict[str, int] | None):
        from fleet.service.service import Service
        from storage import open_repository

        self.cfg = cfg
        self.clock = SteppedClock(MONTH_START_TS)
        self.svc = Service(cfg, open_repository(f"sqlite:///{db}"), self.clock, score_windows=windows)

    def tick_through(self, hour: int) -> None:
        """One tick of the scheduler at month hour `hour`: score what has settled, decide (and act on) it."""
        self.clock.t = MONTH_START_TS + hour * HOUR_S + self.cfg.schedule.settle_s  # an hour is scored once settled
        self.svc.score_job()
        self.svc.decide_job()

    def decided_through(self) -> int | None:
        last = self.svc.journal_store.last_decided_ts(MONTH_START_TS, MONTH_START_TS + 720 * HOUR_S)
        return None if last is None else (last - MONTH_START_TS) // HOUR_S

    def close(self) -> None:
        self.svc.telemetry.engine.dispose()


def base_store(tmp: Path, cards: int, fill_hours: int, through_hour: int) -> tuple[Path, object]:
    """The pool's store with its rollups and a service's month through `through_hour`, run an hour at a time."""
    from storage import ClassSpec, open_repository

    cfg = bench_config(cards)
    db = tmp / "base.db"
    repo = open_repository(f"sqlite:///{db}")
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    repo.declare_cards({f"gpu-{i:05d}": "flagship" for i in range(cards)}, MONTH_START_TS - HISTORY_HOURS * HOUR_S)
    repo.engine.dispose()
    fill_rollups(db, cards, MONTH_START_TS - HISTORY_HOURS * HOUR_S, fill_hours)
    runner = BenchService(db, cfg, THREE_WINDOWS)
    for hour in range(through_hour + 1):
        runner.tick_through(hour)
    runner.close()
    return db, cfg


def service_on_copy(tmp: Path, base_db: Path, cfg, windows: dict[str, int] | None, warm_hour: int,
                    late: bool = False) -> BenchService:
    """A new service on a copy of the base store, through one untimed hour (`warm_hour`); with `late`, the copy
    carries a month's journal first (`journal_a_month`)."""
    db = tmp / f"service-{len(windows or {})}{'-late' if late else ''}.db"
    for suffix in ("", "-wal", "-shm"):  # the base was closed, so its WAL is empty or gone; copy whatever is there
        src = Path(f"{base_db}{suffix}")
        if src.exists():
            shutil.copyfile(src, f"{db}{suffix}")
    if late:
        journal_a_month(db, warm_hour)
    runner = BenchService(db, cfg, windows)
    runner.tick_through(warm_hour)
    return runner


def timed_ticks(runner: BenchService, first_hour: int, cpus: list[float] | None = None) -> list[float]:
    """Wall times of the ticks of hours first_hour..DECISION_HOUR (the last a decision hour); their CPU times are
    appended to `cpus` (the process's: the store's work is in it too, and another job's load is not)."""
    walls = []
    for hour in range(first_hour, DECISION_HOUR + 1):
        c0, t0 = time.process_time(), time.perf_counter()
        runner.tick_through(hour)
        walls.append(time.perf_counter() - t0)
        if cpus is not None:
            cpus.append(time.process_time() - c0)
    if runner.decided_through() != DECISION_HOUR:
        raise SystemExit(f"bench: the service decided through hour {runner.decided_through()}, not {DECISION_HOUR}")
    return walls


def child_service(cards: int, repeats: int, scrape: bool = True, fill_hours: int = HISTORY_HOURS + 720) -> dict:
    """A service beside a pool of `cards` with hourly rollups in SQLite: time its scheduler tick (score the hour
    through the policy's two windows, and through three; size; evict at the decision hour), the same after a month
    of a moving pool's journal (`journal_a_month`), and a scrape of its `/metrics`."""
    first = DECISION_HOUR - repeats
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        base_db, cfg = base_store(tmp, cards, fill_hours, first - 2)
        setup_s = time.perf_counter() - t0
        runner = service_on_copy(tmp, base_db, cfg, None, first - 1)  # the policy's windows: day for sizing, hour for eviction
        cpus_policy: list[float] = []
        walls_policy = timed_ticks(runner, first, cpus_policy)
        runner.close()
        runner = service_on_copy(tmp, base_db, cfg, THREE_WINDOWS, first - 1)
        cpus: list[float] = []
        walls = timed_ticks(runner, first, cpus)
        tick = {"cards": cards, "tick_median_s": statistics.median(walls[:-1]) if len(walls) > 1 else walls[0],
                "tick_decision_s": walls[-1], "tick_policy_windows_s": statistics.median(walls_policy),
                "cpu": {"tick_median_s": statistics.median(cpus[:-1]) if len(cpus) > 1 else cpus[0],
                        "tick_decision_s": cpus[-1], "tick_policy_windows_s": statistics.median(cpus_policy)},
                "setup_seconds": setup_s}
        if scrape:
            tick["scrape"] = scrapes(runner.svc, repeats)
        runner.close()
        # The same hours after a month of a moving pool's journal (the policy's windows).
        runner = service_on_copy(tmp, base_db, cfg, None, first - 1, late=True)
        cpus_late: list[float] = []
        walls_late = timed_ticks(runner, first, cpus_late)
        runner.close()
        tick["tick_late_s"] = statistics.median(walls_late[:-1]) if len(walls_late) > 1 else walls_late[0]
        tick["tick_late_decision_s"] = walls_late[-1]
        tick["cpu"]["tick_late_s"] = statistics.median(cpus_late[:-1]) if len(cpus_late) > 1 else cpus_late[0]
        tick["cpu"]["tick_late_decision_s"] = cpus_late[-1]
        return tick


def child_tick_large(cards: int, repeats: int) -> dict:
    """The tick alone at a large pool (`--tick-large`): rollups only for the hours the ticks read, no scrape."""
    return child_service(cards, repeats, scrape=False, fill_hours=TICK_FILL_HOURS)


def child_tick_profile(cards: int, repeats: int, top: int = 30) -> str:
    """cProfile of one tick at the hour before the decision hour and one at the decision hour (three windows), on
    the set-up the timed ticks have; the functions that took longest, by their own time and with what they call."""
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        tmp = Path(tmp)
        first = DECISION_HOUR - repeats
        base_db, cfg = base_store(tmp, cards, TICK_FILL_HOURS, first - 2)
        runner = service_on_copy(tmp, base_db, cfg, THREE_WINDOWS, first - 1)
        for hour in range(first, DECISION_HOUR - 1):
            runner.tick_through(hour)
        out = io.StringIO()
        for hour, name in ((DECISION_HOUR - 1, "an hour"), (DECISION_HOUR, "the decision hour")):
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.runcall(runner.tick_through, hour)
            wall = time.perf_counter() - t0
            out.write(f"\n=== {cards:,} cards, three windows, {name} (month hour {hour}): {wall * 1000:.1f} ms under the "
                      "profiler\n")
            stats = pstats.Stats(prof, stream=out).strip_dirs()
            stats.sort_stats("cumulative").print_stats(top)
            stats.sort_stats("tottime").print_stats(top)
        runner.close()
        return out.getvalue()


def scrapes(svc, repeats: int) -> dict:
    """A scrape of the service's `/metrics` over HTTP: per-card series on, off, and as Prometheus asks."""
    from fleet.ingest import REASONS
    from fleet.service.metrics import FleetCollector, make_registry, serve_metrics

    svc.metrics_job()
    found = {}
    # What Prometheus sends: OpenMetrics first, and gzip (the body is counted as it comes over the wire).
    as_prometheus = {"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
                     "Accept-Encoding": "gzip"}
    for key, per_card, headers in (("per_card", True, {}), ("no_per_card", False, {}), ("prometheus", True, as_prometheus)):
        collector = FleetCollector(lambda: svc.snapshot, lambda: svc.stats, per_card=per_card, quarantine_reasons=REASONS)
        server, _thread = serve_metrics(make_registry(collector), "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        times, size, body = [], 0, b""
        for _ in range(max(repeats, 3)):
            t0 = time.perf_counter()
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as resp:
                body = resp.read()
            times.append(time.perf_counter() - t0)
            size = len(body)
        server.shutdown()
        if headers:
            body = gzip.decompress(body)
        found[key] = {"median_s": statistics.median(times), "bytes": size, "series": body.count(b"\n") - body.count(b"\n#")}
    return found
