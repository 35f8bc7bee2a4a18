"""`fleet compare`'s table and recommendation as text: each figure in its unit, the rows' labels, and the words
for what the nearest combination fails when none passes."""

from __future__ import annotations

import math
import sys

from rich.markup import escape

from fleet.cli.tables import Columns, piped_text, print_table, wide_console
from fleet.core.compare import AXES, CHECKS, HEADROOM_SEARCH, SEARCH_CONFIDENCE, ComboSummary, Recommendation, rank_of
from fleet.core.demand_search import ForecastChoice
from fleet.core.noise_ceiling import NoiseCeiling
from fleet.core.shortfall import Shortfall
from fleet.report.verdict import KNEW_DEMAND
from fleet.sweep import SCREEN_MONTHS


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

CHECK_HEADERS = {"capacity": "cap", "convergence": "conv", "eviction": "evict", "latency": "latency"}


def shown_checks(summaries) -> list[str]:
    """The checks a table shows: latency only where some row has a promise."""
    return [c for c in CHECKS if c != "latency" or any(s.combo.promised for s in summaries)]

AXIS_HEADERS = {"window": "evict window", "size_window": "size window", "share": "share", "mode": "mode", "headroom": "headroom",
                "card_class": "class", "score": "score", "forecast": "forecast", "forecast_quantile": "error q",
                "size_to": "size to", "stream_tps": "stream tok/s", "ttft_ms": "ttft ms"}


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
        f"    passes capacity {_pct(pr['capacity'])}, convergence {_pct(pr['convergence'])}, eviction {_pct(pr['eviction'])}"
        + (f", latency {_pct(pr['latency'])}; all four " if s.combo.promised else "; all three ")
        + f"{_pct(s.all_checks_pass_rate)} of {s.months} {'month' if s.months == 1 else 'months'}"
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
    checks = shown_checks(summaries)
    cols = Columns(
        headers=([""] if rec is not None else []) + [AXIS_HEADERS[a] for a in varying] + list(FIGURE_HEADERS.values())
        + [f"pass {CHECK_HEADERS[c]}" for c in checks],
        figures=([False] if rec is not None else []) + [False] * len(varying) + [True] * (len(FIGURE_HEADERS) + len(checks)),
    )
    for s in summaries:
        row = []
        if rec is not None:
            row.append({1: "best", 2: "2nd"}.get(rank_of(rec, s) or 0, ""))
        row += [_axis_value(s, a) for a in varying]
        row += [_fig(k, s.figures[k]) for k in FIGURE_HEADERS]
        row += [_pct(s.pass_rate[c]) for c in checks]
        cols.add_row(*row)
    print_table(console, cols)
    console.print(
        f"  pass marks: unmet demand <= {marks.max_unmet_share:.1%} of demand; ideal / real bill >= {marks.min_convergence:.0%}; "
        f"wrong evictions <= {marks.max_wrong_evictions}"
        + (f"; within the promise >= {marks.latency_share:.0%} of delivered" if "latency" in checks else ""),
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


def forecast_note(choice: ForecastChoice, min_pass: float) -> str:
    """The line under a `--recommend` table saying which forecaster the search ran with, and why."""
    q = choice.forecast_quantile
    said = f"  forecast: {choice.forecast}" + (f" sized to its errors' {q:g} quantile" if q else " with no error margin")
    if choice.headroom is None:
        return (f"{said}, chosen on the search's demand alone: no forecaster and margin covers the demand within headroom "
                f"{HEADROOM_SEARCH[1]:g} in {min_pass:.0%} of months, and this one errs least (mean error "
                f"{choice.forecast_error:.1%} an hour)")
    return (f"{said}, chosen on the search's demand alone (least capacity held, {choice.held_over_demand:.3f}× demand, "
            f"at the least headroom covering it, {choice.headroom:g})")


def _mark_text(check: str, value: float) -> str:
    if check == "capacity":
        return f"{value:.2%} of demand"
    if check == "convergence":
        return f"{value:.1%}"
    if check == "latency":  # the share of delivered tokens served within the promise
        return f"{value:.2%} of delivered tokens within the promise"
    return f"{value:,.0f} wrong"


def shortfall_lines(short: Shortfall) -> list[str]:
    """What the nearest combination fails by, the marks that would pass, and what the clairvoyant view says."""
    lines = ["What it fails by:"]
    for c in short.checks:
        line = (f"  {c.check}: {_mark_text(c.check, c.median)} in the median month against the mark "
                f"{_mark_text(c.check, c.mark)}; passes in {c.pass_rate:.0%} of months")
        if c in short.binding:
            line += (f", {short.min_pass_rate:.0%} needed: a mark of {_mark_text(c.check, c.passing_mark)} passes "
                     f"(--set {c.setting})")
        lines.append(line)
    if len(short.binding) > 1 or short.together_pass_rate < short.min_pass_rate - 1e-12:
        lines.append(f"  with {'these marks' if len(short.binding) > 1 else 'that mark'} it passes every check in "
                     f"{short.together_pass_rate:.0%} of months")
    peak = (f"demand peaks at {short.demand_peak_tps:,.0f} tok/s in the median month, against {short.pool_rated_tps:,.0f} "
            "tok/s rated for every card of the classes it rents")
    twin = short.clairvoyant
    told = ("It is told each hour's demand already (the clairvoyant view)" if twin is None else
            f"Told each hour's demand (the clairvoyant view), the same policy passes capacity in "
            f"{twin.pass_rate['capacity']:.0%} of months and every check in {twin.all_checks_pass_rate:.0%}")
    short_of_capacity = any(c.check == "capacity" for c in short.binding)
    if short.clairvoyant_passes_capacity:
        forecast = twin is not None and short_of_capacity
        lines.append(told + (": the pool can serve its demand; the forecast is what falls short" if forecast else "") + ".")
    elif short.demand_peak_tps > short.pool_rated_tps:
        lines.append(f"{told}: the pool is too small for its demand's peak ({peak}); no policy of this pool passes capacity.")
    else:
        lines.append(f"{told}: even knowing the demand it falls short ({peak}: the lottery and dips leave less).")
    if short.noise is not None and short.noise.binds:
        lines.append(noise_line(short.noise))
    return lines


def noise_line(noise: NoiseCeiling) -> str:
    """Why no forecast passes capacity and convergence together on a demand with independent hourly noise."""
    return (f"The demand's hour-to-hour noise (σ {noise.jitter:.1%}, drawn afresh each hour) is beyond any forecast: a "
            f"plan set before the hour needs headroom {noise.headroom:.3f} over the hour's level to keep unmet demand "
            f"under {noise.max_unmet_share:.2%}, and then converges at most at {noise.convergence:.1%} against the "
            f"ideal (mark {noise.min_convergence:.1%}), so no policy on the hourly clock passes both. A finer clock "
            "with the reactive loop (step_minutes, [policy.reactive]) follows the hour, or a mark moves.")


def render_recommendation(console, rec: Recommendation, evicting: bool = True, short: Shortfall | None = None) -> None:
    console.print()
    if rec.best is None:
        console.print(
            f"[bold red]No recommendation[/bold red]: none of the {rec.considered} combinations passes every check "
            f"in {rec.min_pass_rate:.0%} of months.",
            highlight=False,
        )
        if rec.closest is not None:
            failing = [f"{c} in {1 - rec.closest.pass_rate[c]:.0%} of months" for c in CHECKS if rec.closest.pass_rate[c] < 1]
            console.print("Nearest to passing, not recommended: it fails " + ", ".join(failing) + ":", highlight=False)
            console.print("  " + _describe(rec.closest, evicting), highlight=False)
        for line in shortfall_lines(short) if short is not None else ():
            console.print(escape(line), highlight=False)
        return
    console.print(
        f"[bold]Recommended[/bold] (highest median convergence, each month capped at 100%, of the {rec.eligible} of "
        f"{rec.considered} combinations passing every check in at least {rec.min_pass_rate:.0%} of months):",
        highlight=False,
    )
    console.print("  " + _describe(rec.best, evicting), highlight=False)
    if rec.best.combo.knows_demand:
        console.print(f"  demand: {KNEW_DEMAND}", highlight=False)
    if rec.runner_up is not None:
        tie = rec.runner_up.figures == rec.best.figures and rec.runner_up.pass_rate == rec.best.pass_rate
        console.print("[bold]Runner-up[/bold]" + (" (the same figures as the best: the axes that differ change nothing here)" if tie else "") + ":", highlight=False)
        console.print("  " + _describe(rec.runner_up, evicting), highlight=False)


def print_compare(show) -> None:
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
