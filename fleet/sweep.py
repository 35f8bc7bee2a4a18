"""Running a compare grid: each combination's scenario checked and resolved, the months spread over workers.

`fleet.core.compare` holds the pure parts (a batch of seeds is a picklable value,
`run_batch` and `run_headroom_batch` plain functions); this module builds the
batches, hands them to an engine (local processes here, a Dask cluster in
`fleet.dask_runner`), reports progress as batches complete, and runs the
recommendation's search (headroom per combination, then the figures).
"""

from __future__ import annotations

import math
import os
import signal
from contextlib import closing
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np

from fleet.core.compare import (
    HEADROOM_SEARCH, SEARCH_CONFIDENCE, Combo, headroom_search, ComboSummary, HeadroomBatch, MonthBatch, MonthFigures, passing_headroom, recommend,
    month_ideals, replay_month,
    run_batch, run_headroom_batch, same_month, summarise,
)
from fleet.core.latency import promise_view
from fleet.core.errors import ConfigError
from fleet.core.preset import Preset
from fleet.core.scenario import Scenario
from fleet.presets import demand_file_tps, resolve_policy


@dataclass(frozen=True)
class GridBase:
    """What a grid starts from: the preset, its fix or not, and compare's `--set` overrides (each combination's own
    overrides go on top)."""

    preset: Preset
    fix: bool = False
    overrides: tuple[str, ...] = ()

    def scenario(self) -> Scenario:
        """The scenario before any combination: the one an axis not given keeps its value from."""
        return self.preset.resolve(fix=self.fix, overrides=list(self.overrides))

    def scenarios(self, combos: Sequence[Combo]) -> list[Scenario]:
        return combo_scenarios(self.preset, combos, self.fix, self.overrides)

    @property
    def base_dir(self) -> Path | None:
        """The folder a preset file's relative paths (a demand file) are read from."""
        return self.preset.path.parent if self.preset.path else None


def combo_scenarios(preset: Preset, combos: Sequence[Combo], fix: bool = False, overrides: Sequence[str] = ()) -> list[Scenario]:
    """The scenario of each combination (after `overrides`, compare's `--set`), checked before any month runs."""
    out = []
    for c in combos:
        s = preset.resolve(fix=fix, overrides=[*overrides, *c.overrides()])
        parts = resolve_policy(s)
        for w, hours in ((c.window, parts.evict_window_hours), (c.size_window, parts.size_window_hours)):
            if hours > s.warmup_hours:
                raise ConfigError(f"window {w!r}: {hours} hours is longer than the {s.warmup_hours} hours of warm-up history")
        out.append(s)
    return out


def _batch_size(seeds: int, slots: int) -> int:
    # Small batches keep the progress bar moving and the workers evenly loaded.
    return max(1, min(8, math.ceil(seeds / (slots * 6))))


class Engine(Protocol):
    """Where a sweep's batches run: `fn(item)` (or `fn(item, common)`) for every item, yielded as each completes.

    The sweep assembles results by the index yielded, never by completion order, so
    every engine gives the same figures in the same order.
    """

    slots: int  # batches that can run at once: sizes the batches

    def run(self, fn: Callable, work: Sequence, common: Any = None) -> Iterator[tuple[int, Any]]: ...

    def close(self, cancel: bool) -> None: ...


_BUSY = [False]
"""In a local worker: whether it is running a batch (a Ctrl-C stops a batch, and is nothing to a worker waiting)."""


def _worker_start() -> None:
    """A local worker's SIGINT: a terminal's Ctrl-C reaches every process of the command. In a batch it stops the
    batch (the parent is told, as of any failure); waiting for work it is ignored, where it used to end the worker
    with its own KeyboardInterrupt traceback. The parent stops and reports, and shuts the workers down."""
    def on_sigint(signum, frame):
        if _BUSY[0]:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)


def _in_worker(fn: Callable, *args):
    _BUSY[0] = True
    try:
        return fn(*args)
    finally:
        _BUSY[0] = False


class LocalEngine:
    """`jobs` local processes (started at the first batch that needs them); one job, or one item, runs in-process."""

    def __init__(self, jobs: int | None = None):
        self.slots = max(1, int(jobs or os.cpu_count() or 1))
        self._pool: Executor | None = None

    def run(self, fn: Callable, work: Sequence, common: Any = None) -> Iterator[tuple[int, Any]]:
        extra = () if common is None else (common,)
        if self.slots == 1 or len(work) == 1:
            for i, item in enumerate(work):
                yield i, fn(item, *extra)
            return
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.slots, initializer=_worker_start)
        futures = {self._pool.submit(_in_worker, fn, item, *extra): i for i, item in enumerate(work)}
        for f in as_completed(futures):
            yield futures[f], f.result()

    def close(self, cancel: bool) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=not cancel, cancel_futures=cancel)
            self._pool = None


def _replay_stored(chunk: tuple, month) -> MonthFigures:
    """One share of a stored month's combinations, replayed on a worker (a plain function, so any engine can run it)."""
    scenarios, parts, seed, exact, ideals, ideals_of = chunk
    return replay_month(scenarios, parts, month, seed, exact, ideals, ideals_of)


class Sweep:
    """Months on an engine (local processes unless one is given; one engine for a whole search), progress per month done."""

    def __init__(self, jobs: int | None = None, base_dir: Path | None = None, on_months: Callable[[int], None] | None = None,
                 engine: Engine | None = None):
        self.engine = engine if engine is not None else LocalEngine(jobs)
        self.base_dir = base_dir
        self.on_months = on_months

    @property
    def jobs(self) -> int:
        return self.engine.slots

    def __enter__(self) -> "Sweep":
        return self

    def __exit__(self, *exc) -> None:
        self.engine.close(cancel=exc[0] is not None)

    def _map(self, fn, work: list, common: Any = None, months_done: bool = True) -> list:
        """Each item's result, in the items' order; progress reported as each batch of seeds completes, in any order."""
        results: list = [None] * len(work)
        with closing(self.engine.run(fn, work, common)) as done:  # closed at once if progress reporting raises (Ctrl-C)
            for i, got in done:
                results[i] = got
                if months_done and self.on_months:
                    self.on_months(len(work[i].seeds))
        return results

    def _batches(self, make, scenarios: Sequence[Scenario], seeds: list[int]) -> list:
        """The grid's seeds cut into batches, each carrying every combination and its resolved policy."""
        same_month(scenarios)
        parts = tuple(resolve_policy(s) for s in scenarios)
        demand = demand_file_tps(scenarios[0], self.base_dir)
        size = _batch_size(len(seeds), self.engine.slots)
        return [make(tuple(scenarios), parts, tuple(seeds[i : i + size]), demand) for i in range(0, len(seeds), size)]

    def months(self, scenarios: Sequence[Scenario], seeds: Sequence[int], exact: bool = True) -> list[MonthFigures]:
        """Every combination replayed on every seed's month; results in seed order."""
        if not scenarios:
            raise ValueError("no combination to run")
        work = self._batches(lambda sc, parts, seeds, demand: MonthBatch(sc, parts, seeds, exact, demand), scenarios, list(seeds))
        return sorted((m for got in self._map(run_batch, work) for m in got), key=lambda m: m.seed)

    def headrooms(self, scenarios: Sequence[Scenario], seeds: Sequence[int], search: tuple = HEADROOM_SEARCH,
                  guesses: Sequence[float] | None = None) -> np.ndarray:
        """(months, combinations): each month's smallest headroom passing capacity under each combination (`guesses`:
        where each combination's searches start, another set of months' answer)."""
        start = None if guesses is None else tuple(float(g) for g in guesses)
        work = self._batches(lambda sc, parts, seeds, demand: HeadroomBatch(sc, parts, seeds, search, demand, start),
                             scenarios, list(seeds))
        rows = sorted((r for got in self._map(run_headroom_batch, work) for r in got), key=lambda r: r[0])
        return np.stack([h for _, h in rows])

    def stored_month(self, scenarios: Sequence[Scenario], month, seed: int, exact: bool = True) -> MonthFigures:
        """One stored month under every combination, the combinations split into one share per worker slot.

        The month's ideal bill depends on the month only: it is computed once, here, and every
        share gets it; the replays, which grow with the grid, are what spreads.
        The month goes to the engine once, as the work's common argument.
        """
        if not scenarios:
            raise ValueError("no combination to run")
        parts = [resolve_policy(s) for s in scenarios]
        size = math.ceil(len(scenarios) / min(len(scenarios), self.engine.slots))
        ideals = month_ideals(month, exact, promise_view(scenarios[0], month.class_names, month.card_class))
        work = [(tuple(scenarios[i : i + size]), tuple(parts[i : i + size]), seed, exact, ideals, scenarios[0])
                for i in range(0, len(scenarios), size)]
        shares = self._map(_replay_stored, work, common=month, months_done=False)
        return replace(shares[0], figures=np.concatenate([m.figures for m in shares]), passes=np.concatenate([m.passes for m in shares]))


def run_grid(
    scenarios: Sequence[Scenario],
    seeds: Sequence[int],
    exact: bool = True,
    jobs: int | None = None,
    base_dir: Path | None = None,
    on_months: Callable[[int], None] | None = None,
) -> list[MonthFigures]:
    """Replay every combination on every seed's month, over `jobs` processes; results in seed order."""
    with Sweep(jobs, base_dir, on_months) as sweep:
        return sweep.months(scenarios, seeds, exact)


@dataclass(frozen=True)
class Searched:
    """A recommendation search's outcome: the summaries of the combinations kept, and those no headroom could pass."""

    summaries: list[ComboSummary]
    unreachable: list[Combo]  # no headroom up to the search's top passes capacity in --min-pass of months
    screened: int  # combinations searched on the first months only, then dropped
    months: list[MonthFigures]  # the final round's months, every combination kept
    month_headrooms: np.ndarray | None = None  # (months, combinations): each month's least passing headroom


SCREEN_MONTHS = 30
"""Months the first round of a large search is run on; the best `SCREEN_KEEP` combinations go on to every month."""
SCREEN_KEEP = 4


def search(
    sweep: Sweep,
    grid: GridBase,
    combos: Sequence[Combo],
    seeds: Sequence[int],
    min_pass_rate: float,
    exact: bool = True,
    on_stage: Callable[[str, int], None] | None = None,
) -> Searched:
    """For each combination the smallest headroom passing capacity in `min_pass_rate` of the months, then its figures.

    With more combinations than `SCREEN_KEEP` and more months than `SCREEN_MONTHS`, a
    first round runs every combination on the first `SCREEN_MONTHS` months (headroom
    searched on those months) and keeps the `SCREEN_KEEP` best by the recommendation's
    own order; the second round searches their headroom again on every month and
    replays them there. Every figure reported comes from the second round.
    """
    seeds = list(seeds)
    combos = list(combos)
    screened = 0
    unreachable: list[Combo] = []
    known = None
    if len(combos) > SCREEN_KEEP and len(seeds) > SCREEN_MONTHS:
        first = _round(sweep, grid, combos, seeds[:SCREEN_MONTHS], min_pass_rate, exact, on_stage, "screening")
        rec = recommend(first.summaries, min_pass_rate)
        order = sorted(first.summaries, key=lambda s: (s is not rec.best, s is not rec.runner_up,
                                                        -s.all_checks_pass_rate, -s.figures["convergence_capped"]["median"]))
        keep = [replace(s.combo, headroom=0.0) for s in order[:SCREEN_KEEP]]
        screened = len(combos) - len(keep)
        unreachable = [c for c in first.unreachable]
        kept = [i for i, c in enumerate(combos) if replace(c, headroom=0.0) in keep]
        combos = [combos[i] for i in kept]
        known = first.month_headrooms[:, kept]  # a month's least passing headroom is its own: not searched again
    final = _round(sweep, grid, combos, seeds, min_pass_rate, exact, on_stage, "search", known)
    return Searched(final.summaries, unreachable + final.unreachable, screened, final.months)


def _round(sweep, grid: GridBase, combos, seeds, min_pass_rate, exact, on_stage, label,
           known: np.ndarray | None = None) -> Searched:
    """One round of the search: each month's least passing headroom under each combination (`known`: those of the
    first months, already searched), the headroom that passes in `min_pass_rate` of them, and the figures there."""
    scenarios = grid.scenarios(combos)
    done = 0 if known is None else known.shape[0]
    if on_stage:
        on_stage(f"{label}: headroom", len(seeds) - done)
    search = headroom_search(scenarios[0])  # the pool's, the same for every combination
    guesses = None if known is None else np.median(known, axis=0)  # the months searched: where a search starts
    h = sweep.headrooms(scenarios, seeds[done:], search, guesses) if done < len(seeds) else np.empty((0, len(combos)))
    if known is not None:
        h = np.concatenate([known, h])
    found = [passing_headroom(h[:, i], min_pass_rate, SEARCH_CONFIDENCE) for i in range(len(combos))]
    # A combination no headroom can pass is replayed at the search's top, so the table shows what it fails.
    chosen = [replace(c, headroom=round(x if x is not None else search[1], 6)) for c, x in zip(combos, found)]
    unreachable = [c for c, x in zip(chosen, found) if x is None]
    if on_stage:
        on_stage(f"{label}: figures", len(seeds))
    months = sweep.months(grid.scenarios(chosen), seeds, exact)
    return Searched(summarise(chosen, months), unreachable, 0, months, h)


DEMAND_SEARCH_MONTHS = 60
"""Months the forecaster is chosen on (the search's first): a forecast's cost is demand's alone, so few suffice."""


def choose_forecast(grid: GridBase, seed: int | None, months: int, min_pass: float):
    """The forecaster and error quantile the card-side search runs with, judged on the search's demand alone."""
    import policies
    from fleet.core.demand_search import rank_forecasts, scenario_demand

    base = grid.scenario()
    first = base.seed if seed is None else seed
    file_tps = demand_file_tps(base, grid.base_dir)
    demand = [scenario_demand(base, s, file_tps) for s in range(first, first + min(months, DEMAND_SEARCH_MONTHS))]

    def build(name: str):
        return policies.forecaster(base.policy.model_copy(update={"forecast": name}))  # each from its own table

    ranked = rank_forecasts(demand, build, error_hours=base.policy.forecast_error_hours, min_pass=min_pass,
                            max_unmet=base.checks.max_unmet_share)
    return ranked[0]


def demand_peak_tps(grid: GridBase, seeds: Sequence[int]) -> float:
    """The demand's peak hour in the median month of these seeds: the demand alone is drawn, not the cards."""
    from fleet.core.demand_search import scenario_demand

    base = grid.scenario()
    file_tps = demand_file_tps(base, grid.base_dir)
    return float(np.median([scenario_demand(base, s, file_tps)[1].max() for s in seeds]))
