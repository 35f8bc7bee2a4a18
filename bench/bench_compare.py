"""Benchmark: 200 months of the noise-evictor grid (eviction window hour, day, week × share 0.1).

Prints the wall time of the whole comparison (draws, replays, exact ideal,
summaries) and the table's main figures. The acceptance mark is under a minute
on two cores.

    python bench/bench_compare.py [--months 200] [--jobs 2] [--preset noise-evictor]
"""

from __future__ import annotations

import argparse
import os
import time

from fleet.core.compare import expand_grid, ideal_summary, summarise
from fleet.sweep import combo_scenarios, run_grid
from fleet.presets import load_preset

TARGET_SECONDS = 60.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="noise-evictor")
    ap.add_argument("--months", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--greedy-ideal", action="store_true", help="convergence against the greedy ideal")
    args = ap.parse_args()

    preset = load_preset(args.preset)
    base = preset.resolve()
    t0 = time.perf_counter()
    combos = expand_grid(base, window=["hour", "day", "week"], share=[0.1])
    scenarios = combo_scenarios(preset, combos)
    months = run_grid(scenarios, range(base.seed, base.seed + args.months), exact=not args.greedy_ideal, jobs=args.jobs)
    summaries = summarise(combos, months)
    ideal = ideal_summary(months, exact=not args.greedy_ideal)
    elapsed = time.perf_counter() - t0

    replays = len(combos) * args.months
    print(f"preset {preset.name}: {len(combos)} combinations x {args.months} months = {replays} replays")
    print(f"jobs {args.jobs} (of {os.cpu_count()} cores), ideal {ideal['method']}")
    print(f"wall time {elapsed:.2f} s ({1000 * elapsed / replays:.1f} ms per replay; target under {TARGET_SECONDS:.0f} s): "
          f"{'PASS' if elapsed < TARGET_SECONDS else 'FAIL'}")
    print()
    print(f"{'window':<8}{'convergence median (p05-p95)':>32}{'wrong evictions':>18}{'pass cap/conv/evict':>24}")
    for s in summaries:
        c, w = s.figures["convergence"], s.figures["wrong_evictions"]
        pr = s.pass_rate
        print(
            f"{s.combo.window:<8}{c['median']:>14.1%} ({c['p05']:.1%}-{c['p95']:.1%})"
            f"{w['median']:>9g} ({w['p05']:g}-{w['p95']:g})"
            f"{pr['capacity']:>10.0%} /{pr['convergence']:>5.0%} /{pr['eviction']:>5.0%}"
        )


if __name__ == "__main__":
    main()
