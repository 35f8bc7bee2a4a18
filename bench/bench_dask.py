"""Benchmark: the noise-evictor grid (eviction window hour, day, week × share 0.1) on local processes and on Dask.

For each month count, the sweep's wall time on `--jobs` local processes and on a
`LocalCluster` of as many single-threaded worker processes on 127.0.0.1 (started
once, its start-up timed apart), the ratio Dask / local, and a check that both gave
the same months. With --repeat N each figure is the median of N runs.

    python bench/bench_dask.py [--months 200,2000] [--jobs 2] [--repeat 1] [--address tcp://HOST:PORT]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from fleet.memory import keep_freed_memory
from fleet.core.compare import expand_grid
from fleet.dask_runner import DaskEngine
from fleet.presets import load_preset
from fleet.sweep import LocalEngine, Sweep, combo_scenarios


def _timed(engine, scenarios, seeds) -> tuple[float, list]:
    t0 = time.perf_counter()
    months = Sweep(engine=engine).months(scenarios, seeds)
    return time.perf_counter() - t0, months


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        x.seed == y.seed and np.array_equal(x.figures, y.figures) and np.array_equal(x.passes, y.passes) for x, y in zip(a, b)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="noise-evictor")
    ap.add_argument("--months", default="200,2000", help="comma-separated month counts")
    ap.add_argument("--jobs", type=int, default=2, help="local processes, and workers of the LocalCluster")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--address", help="an existing scheduler instead of a LocalCluster")
    args = ap.parse_args()
    keep_freed_memory()  # as `fleet` does, so the forked local processes run as they do under `fleet compare`

    preset = load_preset(args.preset)
    base = preset.resolve()
    combos = expand_grid(base, window=["hour", "day", "week"], share=[0.1])
    scenarios = combo_scenarios(preset, combos)
    print(f"preset {preset.name}: {len(combos)} combinations; {args.jobs} local processes vs "
          f"{'the cluster at ' + args.address if args.address else f'a LocalCluster of {args.jobs} workers'}; "
          f"{os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f}); median of {args.repeat} run(s)")

    t0 = time.perf_counter()
    dask = DaskEngine.open(args.address or "local", args.jobs)
    print(f"cluster start-up {time.perf_counter() - t0:.1f} s ({dask.slots} worker threads), not counted below")
    local = LocalEngine(args.jobs)
    try:
        _timed(local, scenarios, range(base.seed, base.seed + args.jobs))  # the pool's processes started, as the cluster's are
        print(f"{'months':>7}{'local s':>10}{'dask s':>10}{'dask/local':>12}{'same months':>13}")
        for n in (int(m) for m in args.months.split(",")):
            seeds = range(base.seed, base.seed + n)
            local_s, dask_s, same = [], [], True
            for _ in range(args.repeat):
                t, a = _timed(local, scenarios, seeds)
                local_s.append(t)
                t, b = _timed(dask, scenarios, seeds)
                dask_s.append(t)
                same = same and _same(a, b)
            lm, dm = statistics.median(local_s), statistics.median(dask_s)
            print(f"{n:>7}{lm:>10.1f}{dm:>10.1f}{dm / lm:>12.2f}{'yes' if same else 'NO':>13}", flush=True)
    finally:
        local.close(cancel=False)
        dask.close(cancel=False)


if __name__ == "__main__":
    main()
