"""Running a compare grid: each combination's scenario checked and resolved, the months spread over processes.

`fleet.core.compare` holds the pure parts (a batch of seeds is a picklable value,
`run_batch` a plain function); this module builds the batches and runs them on
local processes, reporting progress as batches complete.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

from fleet.core.compare import Combo, MonthBatch, MonthFigures, run_batch, same_month
from fleet.core.errors import ConfigError
from fleet.core.scenario import Preset, Scenario
from fleet.presets import demand_file_tps, resolve_policy


def combo_scenarios(preset: Preset, combos: Sequence[Combo], fix: bool = False) -> list[Scenario]:
    """The scenario of each combination, checked so that a bad choice fails before any month runs."""
    out = []
    for c in combos:
        s = preset.resolve(fix=fix, overrides=c.overrides())
        parts = resolve_policy(s)
        for w, hours in ((c.window, parts.evict_window_hours), (c.size_window, parts.size_window_hours)):
            if hours > s.warmup_hours:
                raise ConfigError(f"window {w!r}: {hours} hours is longer than the {s.warmup_hours} hours of warm-up history")
        out.append(s)
    return out


def batches(scenarios: Sequence[Scenario], seeds: Sequence[int], exact: bool, size: int, base_dir: Path | None = None) -> list[MonthBatch]:
    """The grid's months cut into batches of `size` seeds, each carrying every combination and its resolved policy."""
    parts = tuple(resolve_policy(s) for s in scenarios)
    demand = demand_file_tps(scenarios[0], base_dir)
    seeds = list(seeds)
    return [MonthBatch(tuple(scenarios), parts, tuple(seeds[i : i + size]), exact, demand) for i in range(0, len(seeds), size)]


def run_grid(
    scenarios: Sequence[Scenario],
    seeds: Sequence[int],
    exact: bool = True,
    jobs: int | None = None,
    base_dir: Path | None = None,
    on_months: Callable[[int], None] | None = None,
) -> list[MonthFigures]:
    """Replay every combination on every seed's month, over `jobs` processes; results in seed order."""
    if not scenarios:
        raise ValueError("no combination to run")
    same_month(scenarios)
    seeds = list(seeds)
    jobs = max(1, int(jobs or os.cpu_count() or 1))
    # Small batches keep the progress bar moving and the cores evenly loaded.
    size = max(1, min(8, math.ceil(len(seeds) / (jobs * 6))))
    work = batches(scenarios, seeds, exact, size, base_dir)
    results: list[MonthFigures] = []
    if jobs == 1 or len(work) == 1:
        for b in work:
            results.extend(run_batch(b))
            if on_months:
                on_months(len(b.seeds))
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(work))) as pool:
            for b, got in zip(work, pool.map(run_batch, work)):
                results.extend(got)
                if on_months:
                    on_months(len(b.seeds))
    return sorted(results, key=lambda m: m.seed)
