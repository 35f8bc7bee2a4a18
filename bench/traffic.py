"""Real traffic: the cheapest hourly plan against the cheapest plan with a finer clock, on ServeGen's trace pools.

For each pool in `bench/pools/servegen-*.toml`, over months of the card lottery (seeds the pool's own seed + 1..N),
every hourly plan (hourly steps, no queue, no reactive loop) across forecasters, error quantiles and headrooms, and
every plan with the finer clock (10-, 5- or 1-minute steps, the reactive loop, a 60 s queue) across plan and loop
headrooms: the share of months that
lose at most 0.5% of tokens, the median bill, the median convergence (the ideal at the same clock) and lost tokens.
Prints the cheapest of each side that keeps the 0.5% in at least 95% of months, and the clairvoyant bill.

    python bench/traffic.py [--months 20] [--pools servegen-m-mid,servegen-deepseek-r1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleet.presets import draw, load_preset, replay_scenario, resolve_scenario  # noqa: E402

HOURLY = [[f"policy.forecast={f}", f"policy.forecast_quantile={q}", f"policy.headroom={h}"]
          for f in ("last-hour", "seasonal", "holt-winters") for q in ("none", "0.9")
          for h in (1.0, 1.1, 1.2, 1.3, 1.5, 1.75, 2.0, 2.5)]
FINE = [[f"step_minutes={m}", f"policy.headroom={h}", "demand.max_wait_s=60", f"policy.reactive.headroom={r}"]
        for m in (10, 5, 1) for h in (0.6, 0.8, 1.0, 1.2) for r in (1.0, 1.1, 1.2, 1.3)]
FINE += [[f"step_minutes={m}", "policy.forecast=seasonal", f"policy.headroom={h}", "demand.max_wait_s=60",
          f"policy.reactive.headroom={r}"] for m in (10, 5) for h in (0.8, 1.0) for r in (1.0, 1.1)]


def months_of(pool: Path, overrides: list[str], seeds: list[int]) -> list[dict]:
    preset = load_preset(str(pool))
    out = []
    for seed in seeds:
        s = resolve_scenario(preset, overrides=overrides, seed=seed)
        f = replay_scenario(s, base_dir=pool.parent).figures
        lost = f["traffic"]["lost_share"] if "traffic" in f else f["unmet_share"]
        out.append({"bill": f["bill_usd"], "lost": lost, "convergence": f["convergence"]})
    return out


def summary(rows: list[dict]) -> dict:
    return {"pass": sum(r["lost"] <= 0.005 for r in rows) / len(rows), "bill": statistics.median(r["bill"] for r in rows),
            "convergence": statistics.median(r["convergence"] for r in rows), "lost": statistics.median(r["lost"] for r in rows)}


def cheapest(results: list[tuple[str, dict]]) -> tuple[str, dict] | None:
    ok = [(k, v) for k, v in results if v["pass"] >= 0.95]
    return min(ok, key=lambda kv: kv[1]["bill"]) if ok else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--months", type=int, default=20)
    ap.add_argument("--pools", default="servegen-m-mid,servegen-deepseek-r1")
    args = ap.parse_args()
    for name in args.pools.split(","):
        pool = ROOT / "bench" / "pools" / f"{name}.toml"
        base_seed = int(load_preset(str(pool)).raw.get("seed", 0))
        seeds = [base_seed + i for i in range(1, args.months + 1)]
        t0 = time.perf_counter()
        hourly = [(" ".join(o), summary(months_of(pool, o, seeds))) for o in HOURLY]
        fine = [(" ".join(o), summary(months_of(pool, o, seeds))) for o in FINE]
        known = summary(months_of(pool, ["policy.forecast=known", "policy.headroom=1.0"], seeds))
        print(f"\n{name}: {args.months} months, {time.perf_counter() - t0:.0f} s")
        for label, side in (("hourly plan", hourly), ("finer clock", fine)):
            best = cheapest(side)
            if best is None:
                top = max(side, key=lambda kv: kv[1]["pass"])
                print(f"  {label:<12} none keeps 0.5% lost in 95% of months (best: {top[0]}, {top[1]['pass']:.0%} of months)")
            else:
                k, v = best
                print(f"  {label:<12} {k}: bill ${v['bill']:,.0f}, lost {v['lost']:.2%} (median), "
                      f"{v['pass']:.0%} of months pass, convergence {v['convergence']:.1%}")
        print(f"  {'clairvoyant':<12} hourly, known demand: bill ${known['bill']:,.0f}, lost {known['lost']:.2%}, "
              f"convergence {known['convergence']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
