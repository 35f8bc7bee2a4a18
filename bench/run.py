"""Benchmark: the replay, ingest, scoring tick and metrics scrape against this machine's own limits.

    python bench/run.py                 # every figure at its three sizes
    python bench/run.py --quick         # the smallest sizes (the smoke test runs this)
    python bench/run.py --only replay   # one section (replay, ingest, tick, metrics)
    python bench/run.py --only tick --tick-large   # and the tick at 100,000 cards (minutes of setup)
    python bench/run.py --json out.json # also write every figure as JSON
    python bench/run.py --profile-tick 10000   # where a tick's time goes (cProfile), on the timed ticks' set-up

Each figure is the median over `--repeats` runs, measured in a fresh child
process per size (so one size's memory never warms another's, and the child's
peak resident memory is that size's). Where a figure has a reference, the
reference is measured in the same child on the same data, and the ratio is
printed beside it; the target is printed beside every figure it applies to.
"""

from __future__ import annotations

import argparse
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
CODE = Path(os.environ.get("FLEET_BENCH_CODE") or ROOT).resolve()
"""The checkout whose code is measured: this one, or the one `side_by_side.py` names (the procedure stays this one's)."""
sys.path.insert(0, str(CODE))

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
                "eviction": {"rule": "below-median", "window": "hour", "cadence_hours": 24, "share": 0.1, "rules": {"below-median": {"fraction": 0.8}}},
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

def _harness(name: str):
    """A module of this benchmark's own (`bench/NAME.py`), loaded from this checkout whatever code it measures."""
    import importlib.util

    key = f"fleet_bench_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).resolve().parent / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def child_service(cards: int, repeats: int) -> dict:
    """The service's tick and `/metrics` scrape beside a pool of `cards` (`bench/service.py`)."""
    return _harness("service").child_service(cards, repeats)


def child_tick_large(cards: int, repeats: int) -> dict:
    return _harness("service").child_tick_large(cards, repeats)


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
            ("same, after a month's journal (hour 700)", r["tick_late_s"]),
            ("same, and at a decision hour", r["tick_late_decision_s"]),
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


def _one_blas_thread() -> None:
    try:
        from fleet.memory import one_blas_thread
    except ImportError:  # a tree from before the command ran BLAS on one thread, measured as this one runs
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    else:
        one_blas_thread()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the smallest sizes only (seconds, for the smoke test)")
    ap.add_argument("--only", default="", help="comma-separated sections: " + ", ".join(SIZES))
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure; the median is printed (default 3)")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    ap.add_argument("--tick-large", action="store_true",
                    help=f"also time the tick at {TICK_LARGE_CARDS:,} cards (minutes of setup)")
    ap.add_argument("--profile-tick", type=int, default=None, metavar="CARDS",
                    help="only profile one tick and one decision-hour tick at CARDS cards (cProfile, top functions)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--size", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")

    if args.child:
        from fleet.memory import keep_freed_memory

        keep_freed_memory()  # as the fleet command does
        _one_blas_thread()  # so does this
        print(json.dumps([CHILDREN[args.child](int(size), args.repeats) for size in args.size.split(",")]))
        return 0

    if args.profile_tick is not None:
        from fleet.memory import keep_freed_memory

        keep_freed_memory()
        print(_harness("service").child_tick_profile(args.profile_tick, args.repeats))
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
