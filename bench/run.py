"""Benchmark: the replay, ingest, scoring tick and metrics scrape against this machine's own limits.

    python bench/run.py                 # every figure at its three sizes
    python bench/run.py --quick         # the smallest sizes (the smoke test runs this)
    python bench/run.py --only replay   # one section (replay, ingest, tick, metrics)
    python bench/run.py --only tick --tick-large   # and the tick at 100,000 cards (minutes of setup)
    python bench/run.py --json out.json # also write every figure as JSON

Each figure is the median over `--repeats` runs, measured in a fresh child
process per size (so one size's memory never warms another's, and the child's
peak resident memory is that size's). Where a figure has a reference, the
reference is measured in the same child on the same data, and the ratio is
printed beside it; the target is printed beside every figure it applies to.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SIZES = {
    "replay": {"full": (1_000, 10_000, 100_000), "quick": (100, 200, 400)},
    "ingest": {"full": (100_000, 1_000_000, 3_000_000), "quick": (2_000, 4_000, 8_000)},
    "tick": {"full": (1_000, 3_000, 10_000), "quick": (50, 100, 200)},
    "metrics": {"full": (1_000, 3_000, 10_000), "quick": (50, 100, 200)},  # the same service children as the tick
}
WINDOWS = ("hour", "day", "week")


@dataclass
class Figure:
    """One printed line: what was measured, at what size, its median, its reference and target."""

    section: str
    name: str
    size: str
    median_s: float
    unit: str = "s"
    value: float | None = None  # for rates (samples/s), the figure itself; else median_s
    ref_name: str = ""
    ref_median_s: float | None = None
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    extra: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- replay


def bench_scenario(cards: int, window: str = "day"):
    """A flagship pool of `cards`, sized every hour, below-median eviction, diurnal demand scaled with the pool."""
    from fleet.core.scenario import Scenario

    return Scenario.model_validate(
        {
            "name": f"bench-{cards}",
            "seed": 7,
            "hours": 720,
            "warmup_hours": 168,
            "classes": [{"name": "flagship", "rated_tps": 6000, "rent_usd_per_month": 2690, "pool_cards": cards}],
            "lottery": {"sigma": 0.2},
            "dips": {"start_prob_per_hour": 0.006, "hours": 6, "depth": 0.5},
            "telemetry": {"hour_noise": 0.25},
            # Half the pool's rated rate on average, peaking at 80%: the run set moves every hour.
            "demand": {"shape": "diurnal", "avg_tps": 6000 * cards * 0.5, "peak_to_avg": 1.6, "peak_hour": 14},
            "policy": {
                "card_class": "flagship",
                "window": window,
                "mode": "steady",
                "headroom": 1.05,
                "eviction": {"rule": "below-median", "window": "hour", "fraction": 0.8, "cadence_hours": 24, "share": 0.1},
            },
        }
    )


def _timed(fn, repeats: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return walls, cpus


def child_replay(cards: int, repeats: int) -> dict:
    """Draw one month of `cards`, then replay it under each window; the reference is a sum over its telemetry."""
    import cProfile
    import pstats

    import numpy as np

    from fleet.core.month import draw_month
    from fleet.core.replay import replay
    from policies import resolve

    base = bench_scenario(cards)
    t0 = time.perf_counter()
    month = draw_month(base)
    draw_s = time.perf_counter() - t0
    ref_walls, _ = _timed(lambda: float(np.sum(month.measured_tps)), max(repeats, 5))
    out = {"cards": cards, "draw_s": draw_s, "telemetry_mb": month.measured_tps.nbytes / 1e6, "ref_s": statistics.median(ref_walls), "windows": {}}
    for window in WINDOWS:
        sc = bench_scenario(cards, window)
        figures = {}

        def once():
            figures.update(replay(sc, resolve(sc.policy), month).figures)

        walls, cpus = _timed(once, repeats)
        out["windows"][window] = {
            "median_s": statistics.median(walls),
            "first_s": walls[0],
            "cpu_median_s": statistics.median(cpus),
            "evictions": figures["evictions"],
            "cards_warm_avg": figures["cards_warm_avg"],
            "convergence": figures["convergence"],
        }
    # What dominates: one profiled replay (day window), time by stage.
    sc = bench_scenario(cards, "day")
    prof = cProfile.Profile()
    prof.runcall(replay, sc, resolve(sc.policy), month)
    stats = pstats.Stats(prof).stats
    stages = {
        "window scores": ("fleet/core/scores.py", "window_scores_many"),
        "sizing (greedy)": ("policies/steady.py", "size"),
        "ideal operator": ("fleet/core/ideal.py", "ideal_exact_usd_by_hour"),
        "warm bill": ("fleet/core/billing.py", "warm_usd_by_hour"),
        "eviction": ("policies/below_median.py", "judge"),
    }
    total = next(v[3] for k, v in stats.items() if k[0].endswith("fleet/core/replay.py") and k[2] == "replay")
    shares = {}
    for label, (path, func) in stages.items():
        shares[label] = sum(v[3] for k, v in stats.items() if k[0].endswith(path) and k[2] == func) / total
    shares["rest (capacity, figures)"] = max(0.0, 1.0 - sum(shares.values()))
    out["stages"] = shares
    return out


def section_replay(sizes, repeats: int, quick: bool) -> list[Figure]:
    figs = []
    for cards, (r, peak_rss_mb) in zip(sizes, measure("replay", sizes, repeats, quick)):
        for window in WINDOWS:
            w = r["windows"][window]
            target, met = "", None
            ratio = w["median_s"] / r["ref_s"]
            # The time itself, and at most 30 passes over the telemetry (the machine's own limit, whatever its speed).
            if cards == 10_000:
                target, met = "< 1 s, <= 30x", w["median_s"] < 1.0 and ratio <= 30
            elif cards == 100_000:
                target, met = "< 15 s, <= 30x", w["median_s"] < 15.0 and ratio <= 30
            figs.append(
                Figure(
                    "replay",
                    f"replay month, {window} window",
                    f"{cards:,} cards",
                    w["median_s"],
                    ref_name="sum over telemetry",
                    ref_median_s=r["ref_s"],
                    ratio=ratio,
                    target=target,
                    met=met,
                    extra={"first_s": w["first_s"], "cpu_median_s": w["cpu_median_s"], "evictions": w["evictions"], "cards_warm_avg": w["cards_warm_avg"]},
                )
            )
        mem_target, mem_met = ("< 1,000 MB", peak_rss_mb < 1000) if cards == 100_000 else ("", None)
        mem_name = "peak memory (draw + 3 replays)" if not quick else "peak memory (all quick sizes, one process)"
        figs.append(Figure("replay", mem_name, f"{cards:,} cards", peak_rss_mb, unit="MB", value=peak_rss_mb, target=mem_target, met=mem_met))
        figs.append(Figure("replay", "draw the month (synthetic, not replay)", f"{cards:,} cards", r["draw_s"], extra={"telemetry_mb": r["telemetry_mb"]}))
        figs.append(Figure("replay", "stages of a replay (day window)", f"{cards:,} cards", float("nan"), unit="", extra={"stages": r["stages"]}))
    return figs


# --------------------------------------------------------------------------- ingest


def child_ingest(samples: int, repeats: int) -> dict:
    """`fleet ingest` of a CSV of `samples` records (1 in 100 malformed) into a fresh SQLite file, timed in
    process; the reference is plain sqlite3 executemany of the rows it stored, into the same table of
    another fresh file of the same schema, with the same pragmas."""
    import contextlib
    import io
    import sqlite3
    import tempfile

    from bench.telemetry_data import write_csv
    from fleet.cli.app import app
    from storage import open_repository

    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        tmp = Path(tmp)
        csv_path = tmp / "telemetry.csv"
        write_csv(csv_path, samples, cards=1000, bad_every=100)
        walls, cpus, report = [], [], {}
        for i in range(repeats):
            db = tmp / f"fleet-{i}.db"
            open_repository(f"sqlite:///{db}").engine.dispose()  # the schema is made before the clock starts, as for the reference
            out = io.StringIO()
            c0, t0 = time.process_time(), time.perf_counter()
            with contextlib.redirect_stdout(out):
                app(["ingest", str(csv_path), "--db", f"sqlite:///{db}", "--json"], standalone_mode=False)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            report = json.loads(out.getvalue().strip().splitlines()[-1])
        if report["read"] != samples or report["read"] != report["stored"] + report["duplicates"] + report["quarantined"]:
            raise SystemExit(f"bench: ingest counts do not add up: {report}")

        # The reference: the same rows, in the file's order, into the same table of a fresh store.
        src = sqlite3.connect(tmp / "fleet-0.db")
        rows = src.execute("SELECT card_id, ts, tokens_per_s, busy_fraction, batch_id FROM telemetry_samples ORDER BY ts, card_id").fetchall()
        parents = {
            t: src.execute(f"SELECT * FROM {t}").fetchall() for t in ("card_classes", "cards", "ingest_runs", "ingest_batches")
        }
        src.close()
        ref_walls = []
        for i in range(repeats):
            db = tmp / f"plain-{i}.db"
            open_repository(f"sqlite:///{db}").engine.dispose()  # the same schema, by the same migrations
            con = sqlite3.connect(db, isolation_level=None)
            for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "foreign_keys = ON", "temp_store = MEMORY", "cache_size = -65536"):
                con.execute(f"PRAGMA {pragma}")
            for table, prows in parents.items():
                if prows:
                    con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(prows[0]))})", prows)
            t0 = time.perf_counter()
            con.execute("BEGIN")
            con.executemany("INSERT INTO telemetry_samples (card_id, ts, tokens_per_s, busy_fraction, batch_id) VALUES (?, ?, ?, ?, ?)", rows)
            con.execute("COMMIT")
            ref_walls.append(time.perf_counter() - t0)
            con.close()
        return {
            "samples": samples,
            "stored": report["stored"],
            "quarantined": report["quarantined"],
            "median_s": statistics.median(walls),
            "first_s": walls[0],
            "cpu_median_s": statistics.median(cpus),
            "ref_rows": len(rows),
            "ref_s": statistics.median(ref_walls),
        }


def section_ingest(sizes, repeats: int, quick: bool) -> list[Figure]:
    figs = []
    for samples, (r, _) in zip(sizes, measure("ingest", sizes, repeats, quick)):
        rate = samples / r["median_s"]
        plain = r["ref_rows"] / r["ref_s"]
        figs.append(
            Figure(
                "ingest",
                "fleet ingest CSV -> SQLite",
                f"{samples:,} samples",
                r["median_s"],
                unit="samples/s",
                value=rate,
                ref_name="plain executemany",
                ref_median_s=r["ref_s"],
                ratio=rate / plain,
                # A smoke size is mostly the command's start-up: the target is judged at the full sizes only.
                target=">= 0.5x plain and >= 300,000/s" + (" (judged at full sizes)" if quick else ""),
                met=None if quick else rate / plain >= 0.5 and rate >= 300_000,
                extra={"plain_rows_per_s": plain, "first_s": r["first_s"], "cpu_median_s": r["cpu_median_s"], "stored": r["stored"], "quarantined": r["quarantined"]},
            )
        )
    return figs


# --------------------------------------------------------------------------- service: tick and /metrics

from fleet.core.units import HOUR_S  # noqa: E402  (the service's hour)

MONTH_START_TS = 1_767_225_600  # 2026-01-01T00:00Z
HISTORY_HOURS = 168


class _SteppedClock:
    """The service's clock, set by the benchmark."""

    def __init__(self, t: float):
        self.t = float(t)

    def now(self) -> float:
        return self.t

    def wall_seconds(self, clock_seconds: float) -> float:
        return clock_seconds


def _fill_rollups(db: Path, cards: int, first_ts: int, hours: int) -> None:
    """Hourly rollups of every card for `hours` from `first_ts`, written by SQLite itself (setup, not timed)."""
    import sqlite3

    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute(
        """WITH RECURSIVE h(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM h WHERE x < ?)
        INSERT INTO hourly_rollups (card_id, hour_ts, sample_count, tokens_per_s_sum, busy_count, busy_fraction_sum, busy_tokens_per_s_sum)
        SELECT c.id, ? + h.x * 3600, 60,
               60 * (5000 + (c.id * 7919 % 2000) + (abs(random()) % 1000)), 0, 0, 0
        FROM cards AS c, h ORDER BY c.id, h.x""",
        (hours - 1, first_ts),
    )
    con.commit()
    con.close()


def child_tick_large(cards: int, repeats: int) -> dict:
    """The tick alone at a large pool (`--tick-large`): rollups only for the hours the ticks read (the week's
    history and the month's first day), and no scrape, so that 100,000 cards set up in minutes."""
    return child_service(cards, repeats, scrape=False, fill_hours=HISTORY_HOURS + 26)


def child_service(cards: int, repeats: int, scrape: bool = True, fill_hours: int = HISTORY_HOURS + 720) -> dict:
    """A service beside a pool of `cards` with a month of hourly rollups in SQLite: time its scheduler tick
    (score the hour through three windows, size, evict) and a scrape of its `/metrics`."""
    import tempfile
    import urllib.request
    from datetime import datetime, timezone

    from fleet.core.scenario import Demand, Eviction, Policy
    from fleet.ingest import REASONS
    from fleet.service.metrics import FleetCollector, make_registry, serve_metrics
    from fleet.core.scenario import CardClass, Pool
    from fleet.service.config import Month, ServiceConfig
    from fleet.service.service import Service
    from storage import ClassSpec, open_repository

    import shutil

    decision_hour = 24  # the eviction cadence is 24 h: hour 24 is the month's first decision hour
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        base_db = Path(tmp) / "base.db"
        repo = open_repository(f"sqlite:///{base_db}")
        repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
        repo.declare_cards({f"gpu-{i:05d}": "flagship" for i in range(cards)}, MONTH_START_TS - HISTORY_HOURS * HOUR_S)
        repo.engine.dispose()
        _fill_rollups(base_db, cards, MONTH_START_TS - HISTORY_HOURS * HOUR_S, fill_hours)
        cfg = ServiceConfig(
            month=Month(start=datetime.fromtimestamp(MONTH_START_TS, timezone.utc), hours=720),
            pool=Pool(classes=(CardClass(name="flagship", rated_tps=6000, rent_usd_per_month=2690),)),
            policy=Policy(card_class="flagship", window="day", mode="steady", headroom=1.05,
                          eviction=Eviction(rule="below-median", window="hour", fraction=0.8, cadence_hours=24, share=0.1)),
            demand=Demand(shape="diurnal", avg_tps=6000 * cards * 0.5, peak_to_avg=1.6),
        )

        def ticks(windows: dict[str, int] | None) -> tuple[Service, list[float]]:
            """A service on a copy of the store, caught up to just before the timed hours; the ticks' wall times."""
            db = Path(tmp) / f"service-{len(windows or {})}.db"
            shutil.copyfile(base_db, db)
            clock = _SteppedClock(MONTH_START_TS)
            svc = Service(cfg, open_repository(f"sqlite:///{db}"), clock, score_windows=windows)

            def tick_through(hour: int) -> None:
                clock.t = MONTH_START_TS + hour * HOUR_S + cfg.schedule.settle_s  # an hour is scored once its start has settled
                svc.score_job()
                svc.decide_job()

            tick_through(decision_hour - 1 - repeats)  # setup: the month so far, in one catch-up
            walls = []
            for h in range(decision_hour - repeats, decision_hour + 1):  # the last one timed is the decision hour
                t0 = time.perf_counter()
                tick_through(h)
                walls.append(time.perf_counter() - t0)
            decided = svc.store.last_decided_ts(MONTH_START_TS, MONTH_START_TS + 720 * HOUR_S)
            if decided != MONTH_START_TS + decision_hour * HOUR_S:
                raise SystemExit(f"bench: the service decided through {decided}, not hour {decision_hour}")
            return svc, walls

        _, walls_policy = ticks(None)  # the policy's own windows: day for sizing, hour for eviction
        svc, walls = ticks({"hour": 1, "day": 24, "week": 168})  # all three named windows scored (the last marks an hour scored)
        tick = {"cards": cards, "tick_median_s": statistics.median(walls[:-1]) if len(walls) > 1 else walls[0],
                "tick_decision_s": walls[-1], "tick_policy_windows_s": statistics.median(walls_policy)}
        if not scrape:
            return tick
        svc.metrics_job()
        scrapes = {}
        # What Prometheus sends: OpenMetrics first, and gzip (the body is counted as it comes over the wire).
        as_prometheus = {"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
                         "Accept-Encoding": "gzip"}
        for key, per_card, headers in (("per_card", True, {}), ("no_per_card", False, {}), ("prometheus", True, as_prometheus)):
            collector = FleetCollector(lambda: svc.snapshot, lambda: svc.stats, per_card=per_card, quarantine_reasons=REASONS)
            server, _thread = serve_metrics(make_registry(collector), "127.0.0.1", 0)
            url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
            times, size = [], 0
            for _ in range(max(repeats, 3)):
                t0 = time.perf_counter()
                with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as resp:
                    body = resp.read()
                times.append(time.perf_counter() - t0)
                size = len(body)
            server.shutdown()
            if headers:
                body = gzip.decompress(body)
            scrapes[key] = {
                "median_s": statistics.median(times), "bytes": size, "series": body.count(b"\n") - body.count(b"\n#"),
            }
        return {**tick, "scrape": scrapes}


_SERVICE_CACHE: dict = {}


def _service_results(sizes, repeats: int, quick: bool) -> list[dict]:
    key = (tuple(sizes), repeats, quick)
    if key not in _SERVICE_CACHE:
        _SERVICE_CACHE[key] = [r for r, _ in measure("service", sizes, repeats, quick)]
    return _SERVICE_CACHE[key]


TICK_LARGE_CARDS = 100_000
"""The tick's large row (`--tick-large`: its setup alone takes minutes on 2 cores)."""
TICK_TARGETS_S = {10_000: 0.25, TICK_LARGE_CARDS: 2.0}


def section_tick(sizes, repeats: int, quick: bool, large: bool = False) -> list[Figure]:
    figs = []
    results = list(zip(sizes, _service_results(sizes, repeats, quick)))
    if large:
        results.append((TICK_LARGE_CARDS, run_children("tick_large", [TICK_LARGE_CARDS], repeats)[0]))
    for cards, r in results:
        for name, value in (
            ("scheduler tick, hour/day/week scored", r["tick_median_s"]),
            ("same, at a decision hour (+ eviction)", r["tick_decision_s"]),
            ("scheduler tick, the policy's 2 windows", r["tick_policy_windows_s"]),
        ):
            limit = TICK_TARGETS_S.get(cards)
            target, met = (f"< {limit * 1000:,.0f} ms", value < limit) if limit else ("", None)
            figs.append(Figure("tick", name, f"{cards:,} cards", value, target=target, met=met))
    return figs


def section_metrics(sizes, repeats: int, quick: bool) -> list[Figure]:
    figs = []
    for cards, r in zip(sizes, _service_results(sizes, repeats, quick)):
        for key, name, limit in (("per_card", "/metrics scrape, per-card series on", 0.2), ("no_per_card", "/metrics scrape, per-card series off", 0.01),
                                 ("prometheus", "/metrics scrape as Prometheus asks (OpenMetrics, gzip), per-card on", None)):
            sc = r["scrape"][key]
            target, met = (f"< {limit * 1000:.0f} ms", sc["median_s"] < limit) if cards == 10_000 and limit else ("", None)
            figs.append(Figure("metrics", name, f"{cards:,} cards", sc["median_s"], target=target, met=met,
                               extra={"bytes": sc["bytes"], "series": sc["series"]}))
    return figs


# --------------------------------------------------------------------------- harness

CHILDREN = {"replay": child_replay, "ingest": child_ingest, "service": child_service, "tick_large": child_tick_large}


def measure(section: str, sizes, repeats: int, quick: bool) -> list[tuple[dict, float]]:
    """Each size's result and peak resident memory (MB): a fresh child per size, or one for all in quick mode."""
    if quick:
        results = run_children(section, list(sizes), repeats)
        return [(r, _LAST_PEAK_MB[0]) for r in results]
    return [(run_children(section, [size], repeats)[0], _LAST_PEAK_MB[0]) for size in sizes]


_LAST_PEAK_MB = [0.0]


def run_children(section: str, sizes: list[int], repeats: int) -> list[dict]:
    """Run sizes of one section in one fresh interpreter (the quick mode shares one between sizes)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", section, "--size", ",".join(map(str, sizes)), "--repeats", str(repeats)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=str(ROOT))
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"bench: {section} at sizes {sizes} failed (exit {proc.returncode})")
    _LAST_PEAK_MB[0] = usage.ru_maxrss / 1024.0
    return json.loads(stdout.decode().strip().splitlines()[-1])


def _fmt_value(f: Figure) -> str:
    if f.unit == "samples/s":
        return f"{f.value:,.0f}/s ({f.median_s:,.2f} s)"
    if f.unit == "s":
        return f"{f.median_s * 1000:,.1f} ms" if f.median_s < 1 else f"{f.median_s:,.2f} s"
    if f.unit == "":
        return ""
    return f"{f.value:,.0f} {f.unit}"


def _fmt_ref(f: Figure) -> str:
    if f.ref_median_s is None:
        return ""
    if f.unit == "samples/s":
        return f"{f.ratio:.2f}x of {f.ref_name} ({f.extra['plain_rows_per_s']:,.0f} rows/s)"
    ref = f"{f.ref_median_s * 1000:,.2f} ms" if f.ref_median_s < 1 else f"{f.ref_median_s:,.2f} s"
    ratio = f"{f.ratio:,.0f}x" if f.ratio >= 10 else f"{f.ratio:,.2f}x"
    return f"{ratio} of {f.ref_name} ({ref})"


def print_figures(figs: list[Figure]) -> None:
    rows = [("figure", "size", "median", "vs reference (same run)", "target", "")]
    for f in figs:
        if f.extra.get("stages"):
            continue
        verdict = "" if f.met is None else ("met" if f.met else "MISSED")
        rows.append((f.name, f.size, _fmt_value(f), _fmt_ref(f), f.target, verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) if j in (0, 1, 3, 4) else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for f in figs:
        if f.extra.get("stages"):
            parts = ", ".join(f"{k} {v:.0%}" for k, v in sorted(f.extra["stages"].items(), key=lambda kv: -kv[1]))
            print(f"stages of a replay, {f.size}: {parts}")


def header(repeats: int, quick: bool) -> str:
    import numpy as np

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"fleet bench ({'quick' if quick else 'full'}): {os.cpu_count()} cores, load {load:.1f} at start, "
        f"python {platform.python_version()}, numpy {np.__version__}, median of {repeats} runs"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the smallest sizes only (seconds, for the smoke test)")
    ap.add_argument("--only", default="", help="comma-separated sections: " + ", ".join(SIZES))
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure; the median is printed (default 3)")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    ap.add_argument("--tick-large", action="store_true",
                    help=f"also time the tick at {TICK_LARGE_CARDS:,} cards (minutes of setup)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--size", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")

    if args.child:
        from fleet.memory import keep_freed_memory

        keep_freed_memory()  # as the fleet command does
        print(json.dumps([CHILDREN[args.child](int(size), args.repeats) for size in args.size.split(",")]))
        return 0

    sections = [s.strip() for s in args.only.split(",") if s.strip()] or list(SIZES)
    unknown = [s for s in sections if s not in SIZES]
    if unknown:
        ap.error(f"unknown section {unknown[0]!r} (known: {', '.join(SIZES)})")
    runners = {"replay": section_replay, "ingest": section_ingest, "tick": section_tick, "metrics": section_metrics}
    print(header(args.repeats, args.quick), flush=True)
    figs: list[Figure] = []
    for s in sections:
        if s not in runners:
            print(f"{s}: not built yet")
            continue
        extra = {"large": args.tick_large} if s == "tick" else {}
        figs += runners[s](SIZES[s]["quick" if args.quick else "full"], args.repeats, args.quick, **extra)
    print()
    print_figures(figs)
    if args.json:
        args.json.write_text(json.dumps([f.__dict__ for f in figs], indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
