"""`fleet compare`: a grid of policies replayed over many seeded months, as a table, files and a plot."""

from __future__ import annotations

import csv
import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import typer

from fleet.cli.compare_options import GridText, Judging, MonthsWanted, Outputs, PresetChoice, Workers
from fleet.cli.compare_view import _cents, forecast_note, headroom_note, print_compare, render_recommendation, render_table
from fleet.core.compare import (
    DEFAULT_EVICTION_WINDOWS, DEFAULT_SHARES, HEADROOM_SEARCH, MIN_PASS_RATE, REACTIVE_HEADROOM_SEARCH, SEARCH_CONFIDENCE, Recommendation, combo_of,
    csv_rows, default_grid_axes, distinct, expand_grid, ideal_summary, rank_of, recommend, summarise,
)
from fleet.core.noise_ceiling import noise_ceiling
from fleet.core.shortfall import Shortfall, clairvoyant_twin, pool_rated_tps, shortfall
from fleet.sweep import (
    DEMAND_SEARCH_MONTHS, Engine, GridBase, LocalEngine, Searched, Sweep, choose_forecast, demand_peak_tps, search,
)

HELP = (
    "Replay a grid of policies over many seeded months and compare them side by side.\n\n"
    "Every combination of the grid axes given (--window, --size-window, --share, --mode, --headroom, --class, --score, "
    "--forecast, --quantile, and under a promise --size-to, --stream-tps, --ttft-ms; "
    "comma-separated) replays the same months (seeds S, S+1, ...): each month is drawn once and shared, so differences "
    "are the policy's. An axis not given keeps the preset's value (after --set). Each combination gets the median and "
    "90% interval (p05-p95) of convergence, wrong evictions, evictions, unmet demand, bill and idle cost, and the share "
    "of months passing each check.\n\n"
    "The recommendation is printed when the grid has more than one combination: among the combinations whose months "
    f"pass every check (three; four under a promise) together in at least --min-pass of months (default {MIN_PASS_RATE:.0%}), the highest median "
    "convergence with each month capped at 100% (a month short of capacity can show more than 100%, and a shortfall "
    "must not rank a policy higher), ties to the lower median bill. When none passes, it says so and shows what the "
    "nearest one fails and by how much, the marks it would pass at, and whether it passes told each hour's demand (the "
    "clairvoyant view: if not, the pool is too small for its demand); it never recommends a policy that fails, and "
    "under --recommend exits with status 4.\n\n"
    "With --recommend, axes not given search a default grid: every score estimator and sizing mode, every card class "
    "and 'any' of them, eviction off, and where the preset evicts, its rule through the "
    f"{' and '.join(DEFAULT_EVICTION_WINDOWS)} windows at shares {', '.join(f'{v:g}' for v in DEFAULT_SHARES)}. A policy "
    "that must forecast demand runs with the forecaster and error quantile that hold the least capacity on the first "
    f"{DEMAND_SEARCH_MONTHS} months' demand alone (last-hour, seasonal, holt-winters; no margin, 0.5, 0.75, 0.9). Unless "
    "--headroom is given, the headroom of each combination is searched: the smallest (in steps of "
    f"{HEADROOM_SEARCH[2]:g}, from {HEADROOM_SEARCH[0]:g} up to {HEADROOM_SEARCH[1]:g}; from "
    f"{REACTIVE_HEADROOM_SEARCH[0]:g} when the pool runs the reactive loop) that passes the capacity check in "
    "--min-pass of months "
    f"it has not seen with {SEARCH_CONFIDENCE:.0%} confidence (an order statistic of the months' own least passing "
    "headrooms). A large search first runs every combination on the first 30 months and keeps the 4 best for every "
    "month.\n\n"
    "With --db URL or --telemetry FILE the combinations replay one stored month of a real pool instead (the "
    "preset gives market, demand and policy; the ideal uses hindsight, each card's month mean as its true rate).\n\n"
    "Convergence is against the exact ideal (the cheapest whole-card set each hour, an integer program over "
    "counts per class) unless --greedy-ideal; the greedy ideal's gap to it is printed. --json rows carry 'set': "
    "the --set options that replay the row with fleet replay.\n\n"
    "With --dask ADDRESS the months (or a stored month's combinations) run on an existing Dask cluster's workers "
    "(tcp://HOST:PORT; each worker needs fleet installed), with --dask local on a cluster of --jobs (default 2) "
    "worker processes started for the run; the figures are the same as on local processes. Needs the dask extra "
    "(pip install -e '.[dask]' in the checkout). A scheduler that does not answer, or has no worker, within 10 s "
    "(FLEET_DASK_CONNECT_TIMEOUT seconds): exit status 1."
)


DEFAULT_MONTHS = 50

NOTHING_PASSES = 4
"""`fleet compare --recommend`'s exit status when no combination passes (docs/exit-statuses.md)."""


def err_line(message: str) -> None:
    from fleet.cli.output import err_console

    err_console.print(message, markup=False, highlight=False, soft_wrap=True)


def _usage(msg: str) -> Exception:
    from fleet.cli.output import UsageError

    return UsageError(msg)


def _split(option: str, text: str | None) -> list[str] | None:
    if text is None:
        return None
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise _usage(f"{option} {text!r}: expected a comma-separated list with no empty item")
    return items


def _floats(option: str, text: str | None, lo: float, hi: float) -> list[float] | None:
    items = _split(option, text)
    if items is None:
        return None
    out = []
    for t in items:
        try:
            v = float(t)
        except ValueError:
            raise _usage(f"{option} {text!r}: {t!r} is not a number") from None
        if not (lo <= v <= hi):
            raise _usage(f"{option} {text!r}: {t} is outside {lo:g}..{hi:g}")
        out.append(v)
    return out


def _out_path(option: str, path: Path | None, suffixes: tuple[str, ...]) -> Path | None:
    """Check an output file can be written before a long grid runs: by opening it, so the answer is the system's
    (a missing folder, a folder given as the file, a read-only or virtual file system such as /proc)."""
    if path is None:
        return None
    if path.suffix.lower() not in suffixes:
        raise _usage(f"{option} {str(path)!r}: expected a file ending in {' or '.join(suffixes)}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise _usage(f"{option} {str(path)!r}: folder {str(parent)!r} does not exist")
    if path.is_dir():
        raise _usage(f"{option} {str(path)!r}: is a folder")
    existed = path.exists()
    try:
        with path.open("ab"):
            pass
    except OSError as err:
        raise _usage(f"{option} {str(path)!r}: cannot be written ({err.strerror or err})") from None
    if not existed:
        path.unlink(missing_ok=True)  # the probe leaves nothing behind when the run fails before writing
    return path


def run_compare(preset: PresetChoice, axes_text: GridText, wanted: MonthsWanted, judging: Judging, outputs: Outputs,
                workers: Workers) -> None:
    """`fleet compare` with its options parsed (`fleet.cli.compare_command` declares them)."""
    from fleet.presets import load_preset, resolve_policy
    from fleet.report.plot import PLOT_SUFFIXES

    min_pass = MIN_PASS_RATE if judging.min_pass is None else judging.min_pass
    if wanted.db is not None and wanted.telemetry is not None:
        raise _usage("give one of --db URL or --telemetry FILE")
    if wanted.stored and (wanted.count not in (None, 1) or wanted.first_seed is not None):
        raise _usage("--months and --seed draw simulated months; a stored month has one draw")
    months = 1 if wanted.stored else (wanted.count or DEFAULT_MONTHS)
    outputs = replace(outputs, plot=_out_path("--plot", outputs.plot, PLOT_SUFFIXES), csv=_out_path("--csv", outputs.csv, (".csv",)))
    grid = GridBase(load_preset(preset.name), preset.fix, preset.overrides)
    base = grid.scenario()
    resolve_policy(base)
    axes = _axes(axes_text)
    searching = judging.recommend and axes["headroom"] is None and not wanted.stored
    demand_choice = _grid_axes(grid, base, axes, wanted, months, min_pass) if judging.recommend else None
    _check_classes(base, axes["card_class"])
    combos = distinct(expand_grid(base, **axes))
    if outputs.plot:
        from fleet.report.plot import plot_axes

        try:
            plot_axes(combos)
        except ValueError as err:
            raise _usage(f"--plot {str(outputs.plot)!r}: {err}") from None
    scenarios = grid.scenarios(combos)
    first = base.seed if wanted.first_seed is None else wanted.first_seed
    stored_source = f"the stored month {wanted.db or wanted.telemetry}"
    swept, rec, short = _sweep_months(grid, combos, scenarios, range(first, first + months), wanted, _engine(workers),
                                      searching, min_pass, judging.exact)
    ideal = ideal_summary(swept.months, judging.exact)
    _write_files(grid, base, swept.summaries, rec, outputs, stored_source if wanted.stored else f"{months} months from seed {first}")
    # `--recommend` asked for a policy: none passing is its own documented status, in text and in JSON alike.
    status = NOTHING_PASSES if judging.recommend and rec is not None and rec.best is None else 0
    if outputs.json:
        from fleet.core.verdict import json_safe

        payload = [s.as_dict(ideal=ideal, rank=rank_of(rec, s) if rec else None) for s in swept.summaries]
        if short is not None:
            payload[next(i for i, s in enumerate(swept.summaries) if s is rec.closest)]["shortfall"] = short.as_dict()
        typer.echo(json.dumps(_cents(json_safe(payload)), indent=2))
        if status:
            err_line(f"fleet: no recommendation: none of the {rec.considered} combinations passes every check in "
                     f"{min_pass:.0%} of months (the nearest row's \"shortfall\" says what it fails by)")
        raise typer.Exit(status)
    source = stored_source if wanted.stored else f"{months} months (seeds {first}–{first + months - 1})"
    title = f"{grid.preset.name}{' (fix)' if grid.fix else ''}: {len(combos)} combinations × {source}"
    evicting = any(resolve_policy(s).evicts for s in scenarios)

    def show(console) -> None:
        render_table(console, title, swept.summaries, rec, ideal, base.checks, evicting)
        if demand_choice is not None:
            console.print(forecast_note(demand_choice, min_pass), highlight=False)
        if searching:
            console.print(headroom_note(swept.summaries, swept.unreachable, swept.screened, min_pass), highlight=False)
        if rec is not None:
            render_recommendation(console, rec, evicting, short)
        for label, path in (("plot", outputs.plot), ("csv", outputs.csv)):
            if path:
                console.print(f"  wrote {label}: {path}", highlight=False)

    print_compare(show)
    raise typer.Exit(status)


def _axes(text: GridText) -> dict:
    """The grid's axes, each typed value checked (None: not given)."""
    return {
        "window": _split("--window", text.window),
        "size_window": _split("--size-window", text.size_window),
        "share": _floats("--share", text.share, 0.0, 1.0),
        "mode": _split("--mode", text.mode),
        "headroom": _floats("--headroom", text.headroom, 0.5, 5.0),
        "card_class": _split("--class", text.card_class),
        "score": _split("--score", text.score),
        "forecast": _split("--forecast", text.forecast),
        "forecast_quantile": _quantiles_option(text.quantile),
        "size_to": _choices("--size-to", text.size_to, ("promise", "throughput")),
        "stream_tps": _floats("--stream-tps", text.stream_tps, 1e-9, 100_000.0),
        "ttft_ms": _floats("--ttft-ms", text.ttft_ms, 1e-9, 3_600_000.0),
    }


def _choices(option: str, text: str | None, allowed: tuple[str, ...]) -> list[str] | None:
    values = _split(option, text)
    for v in values or ():
        if v not in allowed:
            raise _usage(f"{option} {text!r}: {v!r} is not one of {', '.join(allowed)}")
    return values


def _grid_axes(grid: GridBase, base, axes: dict, wanted: MonthsWanted, months: int, min_pass: float):
    """`--recommend`: every axis not given takes the default grid's values; the forecaster, when not given, is chosen
    on the search's demand alone (returned, to be told), except for a stored month or a policy told the demand."""
    import policies
    from fleet.presets import resolve_policy

    default = default_grid_axes(base, resolve_policy(base).evicts, policies.SCORES.names(), policies.SIZING_MODES.names())
    for k, v in default.items():
        axes[k] = axes[k] or list(v)
    if wanted.stored or base.policy.knows_demand or axes["forecast"] is not None or axes["forecast_quantile"] is not None:
        return None
    choice = choose_forecast(grid, wanted.first_seed, months, min_pass)
    axes["forecast"], axes["forecast_quantile"] = [choice.forecast], [choice.forecast_quantile]
    return choice


def _sweep_months(grid: GridBase, combos, scenarios, seeds, wanted: MonthsWanted, engine: Engine, searching: bool,
                  min_pass: float, exact: bool) -> tuple[Searched, Recommendation | None, Shortfall | None]:
    """The sweep (its summaries and months, the combinations no headroom passes, those screened out), its
    recommendation, and when none passes the nearest one's shortfall, its clairvoyant twin replayed on the same
    months: the stored month once, or the seeded months with a progress bar (through the headroom search under
    `--recommend`)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from fleet.cli.output import err_console

    def judged(sweep: Sweep, found: Searched, replay_twin, demand_peak_tps) -> tuple:
        rec = recommend(found.summaries, min_pass) if len(combos) > 1 else None
        if rec is None or rec.best is not None or rec.closest is None:
            return found, rec, None
        return found, rec, _shortfall(grid, found, rec.closest, replay_twin, demand_peak_tps(), min_pass)

    if wanted.stored:
        from fleet.ingest.stored_month import month_from_store, month_from_telemetry_file

        # The month is read once, through the preset's own policy (a file's unlabelled cards join its class).
        base = grid.scenario()
        month = (month_from_store(wanted.db, base, base_dir=grid.base_dir) if wanted.db
                 else month_from_telemetry_file(wanted.telemetry, base, base_dir=grid.base_dir))
        with Sweep(engine=engine) as sweep:
            results = [sweep.stored_month(scenarios, month, base.seed, exact)]
            return judged(sweep, Searched(summarise(combos, results), [], 0, results),
                          lambda twin: [sweep.stored_month(twin, month, base.seed, exact)], lambda: float(month.demand_tps.max()))
    # The engine is connected (or started) before the progress bar shows: a failure to is one line, not a torn bar.
    name = grid.preset.name
    with Sweep(base_dir=grid.base_dir, engine=engine) as sweep, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
        console=err_console, transient=True,
    ) as progress:
        task = progress.add_task(f"{name}: {len(combos)} combinations × {len(seeds)} months", total=len(seeds))
        sweep.on_months = lambda n: progress.advance(task, n)

        def stage(label: str, n: int) -> None:
            progress.reset(task, total=n, description=f"{name}: {label}, {len(combos)} combinations × {n} months")

        def replay_twin(twin):
            progress.reset(task, total=len(seeds), description=f"{name}: the nearest, told the demand, × {len(seeds)} months")
            return sweep.months(twin, seeds, exact)

        if searching:
            found = search(sweep, grid, combos, seeds, min_pass, exact, on_stage=stage)
        else:
            results = sweep.months(scenarios, seeds, exact)
            found = Searched(summarise(combos, results), [], 0, results)
        return judged(sweep, found, replay_twin, lambda: demand_peak_tps(grid, seeds))


def _shortfall(grid: GridBase, found: Searched, nearest, replay_twin, demand_peak: float, min_pass: float) -> Shortfall:
    """What the nearest combination fails, from its own months, and its clairvoyant twin replayed on the same months."""
    i = next(k for k, s in enumerate(found.summaries) if s is nearest)
    figures = np.stack([m.figures[i] for m in found.months])
    passes = np.stack([m.passes[i] for m in found.months])
    twin = clairvoyant_twin(nearest.combo)
    twin_summary = summarise([twin], replay_twin(grid.scenarios([twin])))[0] if twin is not None else None
    scenario = grid.scenarios([nearest.combo])[0]
    marks = scenario.checks
    noise = None if scenario.fine else noise_ceiling(scenario.demand.jitter, marks.max_unmet_share, marks.min_convergence)
    return shortfall(nearest.combo, figures, passes, marks, min_pass, twin_summary, demand_peak,
                     pool_rated_tps(scenario), noise)


def _write_files(grid: GridBase, base, summaries, rec, outputs: Outputs, source: str) -> None:
    """`--csv` and `--plot`: the preset, its fix and the recommendation marked on the plot."""
    if outputs.csv:
        rows = csv_rows(summaries, rec)
        with outputs.csv.open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if not outputs.plot:
        return
    from fleet.report.plot import plot_compare

    p = grid.preset
    marked = {"the preset": combo_of(p.resolve())}
    if p.fix_raw:
        marked["the fix"] = combo_of(p.resolve(fix=True))
    anchor = rec.best.combo if rec and rec.best else None
    if anchor is None and any(s.combo == marked.get("the fix") for s in summaries):
        anchor = marked["the fix"]
    plot_compare(summaries, outputs.plot, title=f"{p.name}{' (fix)' if grid.fix else ''}: {source}",
                 min_convergence=base.checks.min_convergence, max_wrong_evictions=base.checks.max_wrong_evictions,
                 anchor=anchor, marked=marked)


def _quantiles_option(text: str | None) -> list[float | None] | None:
    values = _split("--quantile", text)
    if values is None:
        return None
    out: list[float | None] = []
    for v in values:
        if v.lower() == "none":
            out.append(None)
            continue
        try:
            q = float(v)
        except ValueError:
            raise _usage(f"--quantile {text!r}: {v!r} is not a number or 'none'") from None
        if not 0 < q < 1:
            raise _usage(f"--quantile {text!r}: {v!r} is not between 0 and 1")
        out.append(q)
    return out


def _check_classes(base, wanted: list[str] | None) -> None:
    """`--class` names classes of the preset's market (or 'any'): say so against the option, not the preset file."""
    names = [c.name for c in base.classes]
    for v in wanted or []:
        if base.policy.model_copy(update={"card_class": v}).unknown_classes(names):
            raise _usage(f"--class {','.join(wanted)!r}: policy.card_class {v!r} is not one of the classes {names} "
                         f"(or 'any') of preset {base.name!r}")


def _engine(workers: Workers) -> Engine:
    """Where the sweep runs: local processes (`--jobs`, default every core), or a Dask cluster (`--dask`)."""
    if workers.dask is None:
        return LocalEngine(workers.jobs or os.cpu_count() or 1)
    from fleet.dask_runner import DaskEngine

    return DaskEngine.open(workers.dask.strip(), workers.jobs)

