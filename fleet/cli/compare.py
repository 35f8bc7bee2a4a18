"""`fleet compare`: a grid of policies replayed over many seeded months, as a table, files and a plot."""

from __future__ import annotations

import csv
import json
import math
import os
import sys
from pathlib import Path

import typer
from rich.markup import escape

from fleet.core.compare import (
    AXES, CHECKS, DEFAULT_EVICTION_WINDOWS, DEFAULT_SHARES, HEADROOM_SEARCH, MIN_PASS_RATE, SEARCH_CONFIDENCE, ComboSummary, Recommendation, combo_of,
    csv_rows, default_grid_axes, distinct, expand_grid, ideal_summary, rank_of, recommend, summarise,
)
from fleet.report.verdict import KNEW_DEMAND
from fleet.cli.tables import Columns, piped_text, print_table, wide_console
from fleet.sweep import DEMAND_SEARCH_MONTHS, SCREEN_MONTHS, Engine, LocalEngine, Sweep, choose_forecast, combo_scenarios, search

HELP = (
    "Replay a grid of policies over many seeded months and compare them side by side.\n\n"
    "Every combination of the grid axes given (--window, --size-window, --share, --mode, --headroom, --class, --score, "
    "--forecast, --quantile; "
    "comma-separated) replays the same months (seeds S, S+1, ...): each month is drawn once and shared, so differences "
    "are the policy's. An axis not given keeps the preset's value (after --set). Each combination gets the median and "
    "90% interval (p05-p95) of convergence, wrong evictions, evictions, unmet demand, bill and idle cost, and the share "
    "of months passing each check.\n\n"
    "The recommendation is printed when the grid has more than one combination: among the combinations whose months "
    f"pass all three checks together in at least --min-pass of months (default {MIN_PASS_RATE:.0%}), the highest median "
    "convergence with each month capped at 100% (a month short of capacity can show more than 100%, and a shortfall "
    "must not rank a policy higher), ties to the lower median bill. When none passes, it says so and shows what the "
    "nearest one fails; it never recommends a policy that fails.\n\n"
    "With --recommend, axes not given search a default grid: every score estimator and sizing mode, every card class "
    "and 'any' of them, eviction off, and where the preset evicts, its rule through the "
    f"{' and '.join(DEFAULT_EVICTION_WINDOWS)} windows at shares {', '.join(f'{v:g}' for v in DEFAULT_SHARES)}. A policy "
    "that must forecast demand runs with the forecaster and error quantile that hold the least capacity on the first "
    f"{DEMAND_SEARCH_MONTHS} months' demand alone (last-hour, seasonal, holt-winters; no margin, 0.5, 0.75, 0.9). Unless "
    "--headroom is given, the headroom of each combination is searched: the smallest (in steps of "
    f"{HEADROOM_SEARCH[2]:g}, up to {HEADROOM_SEARCH[1]:g}) that passes the capacity check in --min-pass of months "
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


def _pct(v: float) -> str:
    return f"{v:.1%}"


def _usd(v: float) -> str:
    return f"${v / 1000:,.1f}k" if abs(v) >= 10_000 else f"${v:,.0f}"


def _count(v: float) -> str:
    """A count of events as a whole number: a percentile between two months' counts is rounded half up."""
    return f"{math.floor(v + 0.5):,d}"


def _fig(key: str, q: dict) -> str:
    """A figure's median with its 90% interval in brackets, in the figure's unit."""
    if key == "convergence":
        return f"{q['median']:.1%} ({q['p05']:.1%}–{q['p95']:.1%})"
    if key in ("bill_usd", "idle_usd"):
        return f"{_usd(q['median'])} ({_usd(q['p05']).lstrip('$')}–{_usd(q['p95']).lstrip('$')})"
    if key in ("wrong_evictions", "evictions"):
        return f"{_count(q['median'])} ({_count(q['p05'])}–{_count(q['p95'])})"
    return f"{q['median']:,.0f} ({q['p05']:,.0f}–{q['p95']:,.0f})"


def _cents(value, usd: bool = False):
    """Dollar figures (keys naming `usd`, and what they hold) to the cent: sums of hourly rent carry float noise
    (28839.999999999993)."""
    if isinstance(value, dict):
        return {k: _cents(v, usd or "usd" in k) for k, v in value.items()}
    if isinstance(value, list):
        return [_cents(v, usd) for v in value]
    return round(value, 2) if usd and isinstance(value, float) else value


FIGURE_HEADERS = {
    "convergence": "convergence",
    "wrong_evictions": "wrong evictions",
    "evictions": "evictions",
    "unmet_avg_tps": "unmet tok/s",
    "bill_usd": "bill",
    "idle_usd": "idle cost",
}

CHECK_HEADERS = {"capacity": "cap", "convergence": "conv", "eviction": "evict"}

AXIS_HEADERS = {"window": "evict window", "size_window": "size window", "share": "share", "mode": "mode", "headroom": "headroom",
                "card_class": "class", "score": "score", "forecast": "forecast", "forecast_quantile": "error q"}


def _axis_value(s: ComboSummary, axis: str) -> str:
    v = s.combo.class_label if axis == "card_class" else getattr(s.combo, axis)
    if v is None:
        return "none"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _label(s: ComboSummary, axes, evicting: bool) -> str:
    """The combination's choices in words; with eviction off, its window and share are left out (they change nothing)."""
    off = not evicting or s.combo.share == 0
    shown = [a for a in axes if not off or a not in ("window", "share")]
    text = s.combo.label(shown)
    return text if not off else ", ".join(p for p in (text, "eviction off") if p)


def every_row(summaries: list[ComboSummary], fixed, evicting: bool) -> str:
    """What the rows share, in words: "eviction off" only when it is off in every row, not because the first is."""
    if not evicting or all(s.combo.share == 0 for s in summaries):
        return _label(summaries[0], fixed, evicting)
    return summaries[0].combo.label([a for a in fixed if a != "share"])


def headroom_note(summaries: list[ComboSummary], unreachable, screened: int, min_pass: float) -> str:
    """The line under a searched table: how each row's headroom was found, the rows no headroom passes (shown at the
    search's top), and the combinations the first round dropped (of them, those that reached it nowhere)."""
    shown = {s.combo for s in summaries}
    in_table = {c for c in unreachable if c in shown}
    dropped = len({c for c in unreachable if c not in shown})
    top = HEADROOM_SEARCH[1]
    note = (f"  headroom: each row's smallest passing capacity in {min_pass:.0%} of unseen months with "
            f"{SEARCH_CONFIDENCE:.0%} confidence (searched up to {top:g} in steps of {HEADROOM_SEARCH[2]:g})")
    if in_table:
        note += f"; {len(in_table)} {'row reaches' if len(in_table) == 1 else 'rows reach'} it nowhere and {'is' if len(in_table) == 1 else 'are'} shown at {top:g}"
    if screened:
        note += f"; {screened} combinations dropped after the first {SCREEN_MONTHS} months"
        if dropped:
            note += f" ({dropped} of them reach it nowhere there)"
    return note


def _describe(s: ComboSummary, evicting: bool = True) -> str:
    f = s.figures
    pr = s.pass_rate
    return (
        f"{escape(_label(s, AXES, evicting))}\n"
        f"    convergence {_fig('convergence', f['convergence'])}, bill {_fig('bill_usd', f['bill_usd'])}, "
        f"idle {_fig('idle_usd', f['idle_usd'])}\n"
        f"    unmet {_fig('unmet_avg_tps', f['unmet_avg_tps'])} tok/s, evictions {_fig('evictions', f['evictions'])}, "
        f"wrong {_fig('wrong_evictions', f['wrong_evictions'])}\n"
        f"    passes capacity {_pct(pr['capacity'])}, convergence {_pct(pr['convergence'])}, eviction {_pct(pr['eviction'])}; "
        f"all three {_pct(s.all_checks_pass_rate)} of {s.months} months"
    )


def render_table(
    console, title: str, summaries: list[ComboSummary], rec: Recommendation | None, ideal: dict, marks, evicting: bool = True
) -> None:
    varying = [a for a in AXES if len({getattr(s.combo, a) for s in summaries}) > 1]
    fixed = [a for a in AXES if a not in varying]
    console.print(f"[bold]{escape(title)}[/bold]", highlight=False)
    if fixed:
        console.print("  every row: " + escape(every_row(summaries, fixed, evicting)), highlight=False)
    console.print("  each figure: median (p05–p95) over the months; pass: share of months passing each check", highlight=False)
    knew = [s for s in summaries if s.combo.knows_demand]
    if knew:
        which = "every row" if len(knew) == len(summaries) else f"{len(knew)} rows (forecast known)"
        console.print(f"  demand: in {which} {KNEW_DEMAND}", highlight=False)
    cols = Columns(
        headers=([""] if rec is not None else []) + [AXIS_HEADERS[a] for a in varying] + list(FIGURE_HEADERS.values())
        + [f"pass {CHECK_HEADERS[c]}" for c in CHECKS],
        figures=([False] if rec is not None else []) + [False] * len(varying) + [True] * (len(FIGURE_HEADERS) + len(CHECKS)),
    )
    for s in summaries:
        row = []
        if rec is not None:
            row.append({1: "best", 2: "2nd"}.get(rank_of(rec, s) or 0, ""))
        row += [_axis_value(s, a) for a in varying]
        row += [_fig(k, s.figures[k]) for k in FIGURE_HEADERS]
        row += [_pct(s.pass_rate[c]) for c in CHECKS]
        cols.add_row(*row)
    print_table(console, cols)
    console.print(
        f"  pass marks: unmet demand <= {marks.max_unmet_share:.1%} of demand; ideal / real bill >= {marks.min_convergence:.0%}; "
        f"wrong evictions <= {marks.max_wrong_evictions}",
        highlight=False,
    )
    if ideal["method"] == "exact":
        g = ideal["greedy_gap_usd"]
        console.print(
            f"  ideal: exact (cheapest whole-card set per hour); the greedy ideal bills ${g['median']:,.2f} more "
            f"(p05–p95 ${g['p05']:,.2f}–{g['p95']:,.2f}) a month ({ideal['greedy_gap_share']['median']:.3%} median), "
            f"over the exact in {ideal['months_with_gap']} of {summaries[0].months} months",
            highlight=False,
        )
    else:
        console.print("  ideal: greedy by true tokens per dollar (--greedy-ideal)", highlight=False)


def render_recommendation(console, rec: Recommendation, evicting: bool = True) -> None:
    console.print()
    if rec.best is None:
        console.print(
            f"[bold red]No recommendation[/bold red]: none of the {rec.considered} combinations passes all three checks "
            f"in {rec.min_pass_rate:.0%} of months.",
            highlight=False,
        )
        if rec.closest is not None:
            failing = [f"{c} in {1 - rec.closest.pass_rate[c]:.0%} of months" for c in CHECKS if rec.closest.pass_rate[c] < 1]
            console.print("Nearest to passing, not recommended: it fails " + ", ".join(failing) + ":", highlight=False)
            console.print("  " + _describe(rec.closest, evicting), highlight=False)
        return
    console.print(
        f"[bold]Recommended[/bold] (highest median convergence, each month capped at 100%, of the {rec.eligible} of "
        f"{rec.considered} combinations passing all three checks in at least {rec.min_pass_rate:.0%} of months):",
        highlight=False,
    )
    console.print("  " + _describe(rec.best, evicting), highlight=False)
    if rec.best.combo.knows_demand:
        console.print(f"  demand: {KNEW_DEMAND}", highlight=False)
    if rec.runner_up is not None:
        tie = rec.runner_up.figures == rec.best.figures and rec.runner_up.pass_rate == rec.best.pass_rate
        console.print("[bold]Runner-up[/bold]" + (" (the same figures as the best: the axes that differ change nothing here)" if tie else "") + ":", highlight=False)
        console.print("  " + _describe(rec.runner_up, evicting), highlight=False)


def run_compare(preset, fix, window, size_window, share, mode, headroom, card_class, score, forecast, quantile, set_, months, seed, recommend_grid, min_pass, plot, csv_path, as_json, jobs, exact, db, telemetry, dask) -> None:
    """`fleet compare` with its options parsed (`fleet.cli.compare_command` declares them)."""
    from fleet.presets import load_preset, resolve_policy
    from fleet.report.plot import PLOT_SUFFIXES

    min_pass = MIN_PASS_RATE if min_pass is None else min_pass
    stored = db is not None or telemetry is not None
    if db is not None and telemetry is not None:
        raise _usage("give one of --db URL or --telemetry FILE")
    if stored and (months not in (None, 1) or seed is not None):
        raise _usage("--months and --seed draw simulated months; a stored month has one draw")
    months = 1 if stored else (months or DEFAULT_MONTHS)
    plot = _out_path("--plot", plot, PLOT_SUFFIXES)
    csv_path = _out_path("--csv", csv_path, (".csv",))
    p = load_preset(preset)
    overrides = list(set_ or [])
    base = p.resolve(fix=fix, overrides=overrides)
    resolve_policy(base)
    axes = {
        "window": _split("--window", window),
        "size_window": _split("--size-window", size_window),
        "share": _floats("--share", share, 0.0, 1.0),
        "mode": _split("--mode", mode),
        "headroom": _floats("--headroom", headroom, 0.5, 5.0),
        "card_class": _split("--class", card_class),
        "score": _split("--score", score),
        "forecast": _split("--forecast", forecast),
        "forecast_quantile": _quantiles_option(quantile),
    }
    searching = recommend_grid and axes["headroom"] is None and not stored
    demand_choice = _grid_axes(p, base, axes, fix, overrides, seed, months, min_pass, stored) if recommend_grid else None
    _check_classes(base, axes["card_class"])
    combos = distinct(expand_grid(base, **axes))
    if plot:
        from fleet.report.plot import plot_axes

        try:
            plot_axes(combos)
        except ValueError as err:
            raise _usage(f"--plot {str(plot)!r}: {err}") from None
    scenarios = combo_scenarios(p, combos, fix=fix, overrides=overrides)
    first = base.seed if seed is None else seed
    source = f"the stored month {db or telemetry}" if stored else f"{months} months (seeds {first}–{first + months - 1})"
    summaries, results, unreachable, screened = _sweep_months(p, base, combos, scenarios, range(first, first + months), db, telemetry,
                                                              _engine(dask, jobs), searching, min_pass, fix, overrides, exact)
    ideal = ideal_summary(results, exact)
    rec = recommend(summaries, min_pass) if len(combos) > 1 else None
    _write_files(p, fix, base, summaries, rec, csv_path, plot,
                 f"the stored month {db or telemetry}" if stored else f"{months} months from seed {first}")
    if as_json:
        from fleet.core.verdict import json_safe

        payload = [s.as_dict(ideal=ideal, rank=rank_of(rec, s) if rec else None) for s in summaries]
        typer.echo(json.dumps(_cents(json_safe(payload)), indent=2))
        return
    title = f"{p.name}{' (fix)' if fix else ''}: {len(combos)} combinations × {source}"
    evicting = any(resolve_policy(s).evicts for s in scenarios)

    def show(console) -> None:
        render_table(console, title, summaries, rec, ideal, base.checks, evicting)
        if demand_choice is not None:
            q = demand_choice.forecast_quantile
            console.print(f"  forecast: {demand_choice.forecast}" + (f" sized to its errors' {q:g} quantile" if q else " with no error margin")
                          + f", chosen on the search's demand alone (least capacity held, {demand_choice.held_over_demand:.3f}× demand,"
                          f" at the least headroom covering it, {demand_choice.headroom:g})", highlight=False)
        if searching:
            console.print(headroom_note(summaries, unreachable, screened, min_pass), highlight=False)
        if rec is not None:
            render_recommendation(console, rec, evicting)
        for label, path in (("plot", plot), ("csv", csv_path)):
            if path:
                console.print(f"  wrote {label}: {path}", highlight=False)

    _print(show)


def _grid_axes(p, base, axes: dict, fix, overrides, seed, months, min_pass, stored):
    """`--recommend`: every axis not given takes the default grid's values; the forecaster, when not given, is chosen
    on the search's demand alone (returned, to be told), except for a stored month or a policy told the demand."""
    import policies
    from fleet.presets import resolve_policy

    grid = default_grid_axes(base, resolve_policy(base).evicts, policies.SCORES.names(), policies.SIZING_MODES.names())
    for k, v in grid.items():
        axes[k] = axes[k] or list(v)
    if stored or base.policy.knows_demand or axes["forecast"] is not None or axes["forecast_quantile"] is not None:
        return None
    choice = choose_forecast(p, base, fix, overrides, seed, months, min_pass)
    axes["forecast"], axes["forecast_quantile"] = [choice.forecast], [choice.forecast_quantile]
    return choice


def _sweep_months(p, base, combos, scenarios, seeds, db, telemetry, engine, searching, min_pass, fix, overrides, exact):
    """(summaries, month results, unreachable combinations, screened) of the sweep: the stored month once, or the
    seeded months with a progress bar (through the headroom search under `--recommend`)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from fleet.cli.output import err_console

    base_dir = p.path.parent if p.path else None
    if db is not None or telemetry is not None:
        from fleet.ingest.stored_month import month_from_store, month_from_telemetry_file

        # The month is read once, through the preset's own policy (a file's unlabelled cards join its class).
        month = month_from_store(db, base, base_dir=base_dir) if db else month_from_telemetry_file(telemetry, base, base_dir=base_dir)
        with Sweep(engine=engine) as sweep:
            results = [sweep.stored_month(scenarios, month, base.seed, exact)]
        return summarise(combos, results), results, [], 0
    # The engine is connected (or started) before the progress bar shows: a failure to is one line, not a torn bar.
    months = len(seeds)
    with Sweep(base_dir=base_dir, engine=engine) as sweep, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
        console=err_console, transient=True,
    ) as progress:
        task = progress.add_task(f"{p.name}: {len(combos)} combinations × {months} months", total=months)
        sweep.on_months = lambda n: progress.advance(task, n)

        def stage(label: str, n: int) -> None:
            progress.reset(task, total=n, description=f"{p.name}: {label}, {len(combos)} combinations × {n} months")

        if searching:
            found = search(sweep, p, combos, seeds, min_pass, fix, overrides, exact, on_stage=stage)
            return found.summaries, found.months, found.unreachable, found.screened
        results = sweep.months(scenarios, seeds, exact)
        return summarise(combos, results), results, [], 0


def _write_files(p, fix, base, summaries, rec, csv_path, plot, source: str) -> None:
    """`--csv` and `--plot`: the preset, its fix and the recommendation marked on the plot."""
    if csv_path:
        rows = csv_rows(summaries, rec)
        with csv_path.open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if not plot:
        return
    from fleet.report.plot import plot_compare

    marked = {"the preset": combo_of(p.resolve())}
    if p.fix_raw:
        marked["the fix"] = combo_of(p.resolve(fix=True))
    anchor = rec.best.combo if rec and rec.best else None
    if anchor is None and any(s.combo == marked.get("the fix") for s in summaries):
        anchor = marked["the fix"]
    plot_compare(summaries, plot, title=f"{p.name}{' (fix)' if fix else ''}: {source}",
                 min_convergence=base.checks.min_convergence, max_wrong_evictions=base.checks.max_wrong_evictions,
                 anchor=anchor, marked=marked)


def _print(show) -> None:
    """On a terminal as Rich draws it; piped or redirected, the table at its natural width, text never hard-wrapped,
    no trailing spaces."""
    from fleet.cli.output import console

    if console.is_terminal:
        show(console)
        return
    wide = wide_console()
    with wide.capture() as captured:
        show(wide)
    sys.stdout.write(piped_text(captured.get()))


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


def _engine(dask: str | None, jobs: int | None) -> Engine:
    """Where the sweep runs: local processes (`--jobs`, default every core), or a Dask cluster (`--dask`)."""
    if dask is None:
        return LocalEngine(jobs or os.cpu_count() or 1)
    from fleet.dask_runner import DaskEngine

    return DaskEngine.open(dask.strip(), jobs)

