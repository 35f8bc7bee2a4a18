"""The finer clock against its targets: replay at 10-minute steps beside the hourly replay, a tenant's jump, and a
recommendation on a real trace.

    python bench/fine_clock.py                     # every section
    python bench/fine_clock.py --only replay       # replay, jump or recommend
    python bench/fine_clock.py --months 200        # the recommendation's months (default 200)

replay     The benchmark pool (`bench/run.py`'s flagships, diurnal demand at half the rated rate) at 1,000 and 10,000
           cards: the hourly replay and the same month at 10-minute steps with a 60 s queue and the reactive loop,
           measured side by side in one process (median of --repeats). Targets: 10-minute steps within 8x the
           hourly time at 1,000 cards, under 10 s at 10,000.
jump       A generated pool of 64 flagships at 1-minute steps, flat demand, and a tenant that triples it at a random
           minute (seeded): tokens lost, served late, the waits and how long the backlog lasted, from the step model.
recommend  `fleet compare --recommend --months N` on bench/pools/servegen-m-mid.toml at 10-minute steps, a 60 s
           queue and the reactive loop, with the convergence check off, on --jobs worker processes. Target: under
           120 s for 200 months on 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

FINE = {"step_minutes": 10, "max_wait_s": 60.0, "reactive": {"headroom": 1.2}}


def _fine(scenario, step_minutes: int = 10, max_wait_s: float = 60.0, reactive: dict | None = None):
    d = scenario.model_dump()
    d["step_minutes"] = step_minutes
    d["demand"] = {**d["demand"], "max_wait_s": max_wait_s}
    d["policy"] = {**d["policy"], "reactive": reactive or {"headroom": 1.2}}
    return type(scenario).model_validate(d)


def _median_s(fn, repeats: int) -> float:
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def section_replay(repeats: int) -> None:
    from run import bench_scenario

    from fleet.core.month import draw_month
    from fleet.core.replay import replay
    from policies import resolve

    print("replay: hourly beside 10-minute steps (60 s queue, reactive loop), one process, median of "
          f"{repeats}")
    for cards, target in ((1_000, "10-minute <= 8x hourly"), (10_000, "10-minute < 10 s")):
        hourly = bench_scenario(cards)
        fine = _fine(hourly)
        month_h, month_f = draw_month(hourly), draw_month(fine)
        parts_h, parts_f = resolve(hourly.policy), resolve(fine.policy)
        replay(hourly, parts_h, month_h), replay(fine, parts_f, month_f)  # first runs: imports, caches
        h_s = _median_s(lambda: replay(hourly, parts_h, month_h), repeats)
        f_s = _median_s(lambda: replay(fine, parts_f, month_f), repeats)
        met = f_s <= 8 * h_s if cards == 1_000 else f_s < 10.0
        f = replay(fine, parts_f, month_f).figures["traffic"]
        print(f"  {cards:>6,} cards  hourly {h_s:7.3f} s  10-minute {f_s:7.3f} s  ratio {f_s / h_s:5.1f}x  "
              f"target {target}: {'met' if met else 'NOT met'}  (lost {f['lost_share']:.2%}, "
              f"{f['reactive_adds']:,} reactive adds)")


def section_jump(seed: int) -> None:
    import numpy as np

    from fleet.core.month import draw_month
    from fleet.core.replay import replay
    from fleet.core.scenario import Scenario
    from policies import resolve

    hours, step = 72, 1
    rng = np.random.default_rng(seed)
    minute = int(rng.integers(24 * 60, (hours - 1) * 60))
    demand = np.full(hours * 60 // step, 64 * 6000 * 0.15)
    demand[minute // step:] *= 3.0
    scenario = Scenario.model_validate({
        "name": "tenant-jump", "seed": seed, "hours": hours, "warmup_hours": 24, "step_minutes": step,
        "classes": [{"name": "flagship", "rated_tps": 6000, "rent_usd_per_month": 2690, "pool_cards": 64,
                     "boot_minutes": 2}],
        "lottery": {"sigma": 0.2}, "dips": {"start_prob_per_hour": 0.006, "hours": 6, "depth": 0.5},
        "telemetry": {"hour_noise": 0.25},
        "demand": {"shape": "file", "file": "generated", "max_wait_s": 120},
        "policy": {"card_class": "flagship", "window": "day", "mode": "steady", "headroom": 1.2,
                   "forecast": "last-hour", "reactive": {"headroom": 1.2, "cooldown_minutes": 60, "max_adds_per_hour": 64}},
    })
    print(f"jump: 64 flagships at {step}-minute steps, {demand[0]:,.0f} tok/s, tripled at minute {minute % 60} of hour "
          f"{minute // 60} (seed {seed}); 2-minute boots, a 120 s queue, the reactive loop at headroom 1.2, up to 64 adds an hour")
    for reactive in (True, False):
        s = scenario if reactive else scenario.model_copy(
            update={"policy": scenario.policy.model_copy(update={"reactive": None})})
        f = replay(s, resolve(s.policy), draw_month(s, demand)).figures
        tr = f["traffic"]
        print(f"  {'with the reactive loop' if reactive else 'plan alone (hourly)':<24} lost "
              f"{tr['lost_tokens']:>14,.0f} tokens ({tr['lost_share']:.3%}), served late "
              f"{tr['served_late_tokens']:>12,.0f}, wait p50/p99 {tr['wait_p50_s']:.0f}/{tr['wait_p99_s']:.0f} s, "
              f"the longest backlog {tr['drain_minutes_max']} min, {tr['reactive_adds']} reactive adds")


def section_recommend(months: int, jobs: int, save: str | None = None) -> None:
    from fleet.cli.app import main

    pool = ROOT / "bench" / "pools" / "servegen-m-mid.toml"
    argv = ["compare", "-p", str(pool), "--recommend", "--months", str(months), "--jobs", str(jobs), "--json",
            "--set", "step_minutes=10", "--set", "demand.max_wait_s=60", "--set", "policy.reactive.headroom=1.2",
            "--set", "checks.min_convergence=0"]
    print(f"recommend: fleet {' '.join(argv[:-8])} (10-minute steps, 60 s queue, reactive 1.2, convergence off)")
    import contextlib
    import io
    import json

    out = io.StringIO()
    t0 = time.perf_counter()
    sys.argv = ["fleet", *argv]
    with contextlib.redirect_stdout(out):
        try:
            status = main()
        except SystemExit as e:
            status = e.code
    took = time.perf_counter() - t0
    rows = json.loads(out.getvalue())
    if save:
        Path(save).write_text(out.getvalue())
    best = next((r for r in rows if r.get("recommendation") == "best"), None)
    print(f"  {months} months on {jobs} workers: {took:.0f} s, exit {status or 0}; target < 120 s for 200 months: "
          f"{'met' if months >= 200 and took < 120 else 'NOT met' if months >= 200 else 'n/a'}")
    if best:
        print(f"  recommends: {best['mode']} mode, headroom {best['headroom']:g}, {best['forecast']} forecast, "
              f"eviction share {best['share']:g}: bill ${best['bill_usd']['median']:,.0f} (median), lost "
              f"{best['unmet_share']['median']:.2%}, {best['all_checks_pass_rate']:.0%} of months pass")
    else:
        print("  recommends nothing (no combination passes; see fleet compare's table)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("replay", "jump", "recommend"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--months", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--save", help="write the recommendation's JSON rows to this file, to compare runs")
    args = ap.parse_args()
    if args.only in (None, "replay"):
        section_replay(args.repeats)
    if args.only in (None, "jump"):
        section_jump(args.seed)
    if args.only in (None, "recommend"):
        section_recommend(args.months, args.jobs, args.save)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
