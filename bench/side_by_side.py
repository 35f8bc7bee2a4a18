"""Two checkouts' benchmark figures side by side, measured in turns on one machine.

    git worktree add /tmp/before <commit>       # the commit to compare against
    python bench/side_by_side.py --baseline /tmp/before            # replay and the service (tick, /metrics), full sizes
    python bench/side_by_side.py --baseline /tmp/before --quick --rounds 1
    python bench/side_by_side.py --baseline /tmp/before --only ingest          # `fleet ingest` into SQLite

Each round runs every size's child (`bench/run.py --child ...`) on the baseline tree's
code, then on this one's, so load that comes and goes falls on both alike; a figure is
the median over the rounds of each child's own median. Both are measured by this tree's
`bench/run.py` (`FLEET_BENCH_CODE` names the code it imports), so a change to the
benchmark's set-up falls on both alike too; `--own-harness` runs each tree's own instead.
Prints every timed figure (the leaves of the child's JSON whose names end in `_s`) for
both, and this tree's over the baseline's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SIZES = {"replay": {"full": (1_000, 10_000, 100_000), "quick": (100, 200)},
         "service": {"full": (1_000, 3_000, 10_000), "quick": (50, 100)},
         "tick_large": {"full": (100_000,), "quick": (1_000,)},  # the tick alone (`run.py --tick-large`)
         "ingest": {"full": (100_000, 1_000_000), "quick": (2_000, 4_000)}}


def leaves(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(obj, (int, float)) and prefix.endswith("_s") and not prefix.endswith("first_s"):
        yield prefix, float(obj)


def child(tree: Path, section: str, size: int, repeats: int, own_harness: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "FLEET_BENCH_CODE": str(tree)}
    harness = (tree if own_harness else HERE) / "bench" / "run.py"
    out = subprocess.run([sys.executable, str(harness), "--child", section, "--size", str(size), "--repeats",
                          str(repeats)], cwd=tree, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{tree}: {section} at {size} failed: {out.stderr.strip()[-400:]}")
    return dict(leaves(json.loads(out.stdout.strip().splitlines()[-1])[0]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="replay,service")
    ap.add_argument("--sizes", default="", help="comma-separated sizes in place of the section's own (e.g. 10000)")
    ap.add_argument("--own-harness", action="store_true", help="run each tree's own bench/run.py, not this tree's")
    args = ap.parse_args()
    args.baseline = args.baseline.resolve()
    harness = "each tree's own harness" if args.own_harness else "this tree's harness on both"
    print(f"baseline {args.baseline}, this tree {HERE} ({harness}); {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    for section in args.only.split(","):
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()] or SIZES[section]["quick" if args.quick else "full"]
        for size in sizes:
            got = {"base": [], "this": []}
            for _ in range(args.rounds):
                got["base"].append(child(args.baseline, section, size, args.repeats, args.own_harness))
                got["this"].append(child(HERE, section, size, args.repeats, args.own_harness))
            print(f"\n{section}, {size:,}:")
            for key in got["this"][0]:
                if key not in got["base"][0]:
                    continue
                b = statistics.median(r[key] for r in got["base"])
                t = statistics.median(r[key] for r in got["this"])
                print(f"  {key:<40} baseline {b * 1000:10.1f} ms   this {t * 1000:10.1f} ms   {t / b if b else float('nan'):6.2f}x")
    print(f"\nload {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
