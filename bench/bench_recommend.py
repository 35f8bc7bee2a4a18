"""Benchmark: `fleet compare -p P --recommend --months 200` for each preset and a pool whose demand must be
forecast (`bench/pools/structured-demand.toml`), timed as a user runs it.

Each run is the command itself in a child process (start-up, the search's two rounds,
the exact ideal, the table), timed on the wall clock; the target is under a minute
on two cores. Prints each preset's time, its recommendation and the machine's load.

    python bench/bench_recommend.py [--months 200] [--repeats 1] [--preset noise-evictor ...] [--save DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TARGET_SECONDS = 60.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", action="append", default=None)
    ap.add_argument("--months", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--save", default=None, metavar="DIR", help="Also write each preset's --json output to DIR/P.json.")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    presets = args.preset or ["noise-evictor", "golden-idler", "bargain-shortfall",
                              os.path.join(here, "pools", "structured-demand.toml")]
    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at the start")
    failed = False
    for name in presets:
        walls, rows = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "fleet.cli.app", "compare", "-p", name, "--recommend", "--months",
                                  str(args.months), "--json"], capture_output=True, text=True, check=False)
            walls.append(time.perf_counter() - t0)
            if out.returncode not in (0, 4):  # 4: nothing passes, the rows still printed
                print(f"{name}: exit {out.returncode}: {out.stderr.strip()[-300:]}")
                return 1
            rows = json.loads(out.stdout)
            if args.save:
                os.makedirs(args.save, exist_ok=True)
                with open(os.path.join(args.save, f"{os.path.basename(name).removesuffix('.toml')}.json"), "w") as f:
                    f.write(out.stdout)
        wall = statistics.median(walls)
        failed |= wall >= TARGET_SECONDS
        best = next((r for r in rows if r["recommendation"] == "best"), None)
        what = " ".join(best["set"]) if best else "no recommendation"
        conv = f"{best['convergence_capped']['median']:.1%} capped median convergence, all checks {best['all_checks_pass_rate']:.1%}" if best else ""
        print(f"{os.path.basename(name)}: {wall:.1f} s (median of {len(walls)}; target < {TARGET_SECONDS:.0f} s: "
              f"{'met' if wall < TARGET_SECONDS else 'missed'}); {len(rows)} rows; {conv}")
        print(f"    {what}")
    print(f"load {os.getloadavg()[0]:.2f} at the end")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
