"""Rendering a verdict and a spread over seeds for the terminal."""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

SPREAD_FIGURES = (
    "bill_usd",
    "bill_warm_usd",
    "bill_churn_usd",
    "idle_usd",
    "idle_share",
    "ideal_bill_usd",
    "convergence",
    "demand_avg_tps",
    "delivered_avg_tps",
    "unmet_share",
    "cards_warm_avg",
    "cards_warm_max",
    "evictions",
    "wrong_evictions",
)


def _usd(v: float) -> str:
    return f"${v:,.0f}"


def _mark(ok: bool) -> str:
    return "[green]PASS[/green]" if ok else "[red]FAIL[/red]"


def describe_policy(f: dict) -> str:
    """The policy replayed, in the words of a preset's story: the cards and the window they are judged through."""
    cards = f"{f['pool_cards']} {f['card_class']} cards"
    if f["eviction_rule"] == "none" or f["eviction_share"] <= 0:
        return f"{cards} sized through the {f['window']} window in {f['mode']} mode, no eviction"
    return (f"{cards} judged through the {f['eviction_window']} window ({f['eviction_rule']} eviction, share "
            f"{f['eviction_share']:g}), sized through the {f['window']} window in {f['mode']} mode")


KNEW_DEMAND = "the policy knew each hour's demand ahead (forecast \"known\"), which no real autoscaler does"


def demand_line(f: dict) -> str:
    """One line on how the policy saw demand; a policy that knew it says so."""
    if f.get("knew_demand"):
        return f"demand: {KNEW_DEMAND}"
    q = f.get("forecast_quantile")
    margin = f", sized to it × the {q:g} quantile of its recent errors" if q else ""
    err = f.get("forecast_error")
    shown = f"; its mean absolute error {err:.1%}" if err is not None and err == err else ""
    return f"demand: forecast by {f.get('forecast', '?')} from the hours before each hour{margin}{shown}"


def traffic_words(tr: dict) -> str:
    """The finer clock in words: billing, the queue and the reactive loop."""
    queue = ("no queue (a step's unserved tokens are lost)" if not tr["max_wait_s"]
             else f"a queue of {tr['max_wait_s']:g} s" if tr["max_wait_s"] >= tr["step_minutes"] * 60
             else f"a queue of {tr['max_wait_s']:g} s, under one step: nothing carries over")
    loop = f"the reactive loop added {tr['reactive_adds']} cards" if tr["reactive"] else "no reactive loop"
    return f"billed by {tr['billing_minutes']} minutes; {queue}; {loop}"


def promise_words(f: dict) -> str:
    """The promise as the verdict states it: its stream floor and its first-token wait at the percentile."""
    parts = []
    if f.get("slo_stream_tps") is not None:
        parts.append(f"streams >= {f['slo_stream_tps']:g} tok/s")
    if f.get("slo_ttft_ms") is not None:
        parts.append(f"first token <= {f['slo_ttft_ms']:,.0f} ms at p{f['slo_percentile'] * 100:g}")
    return ", ".join(parts)


def headline(preset, fix: bool, r, overrides=(), source: str | None = None) -> str:
    """The verdict's first line. The preset's story tells of its own month and policy, so it heads the verdict only
    when that is what was replayed (another seed is the same story); after a `--set` that changes the scenario, or on
    a stored month, the headline says what was replayed instead."""
    name = f"{preset.name}{' (fix)' if fix else ''}"
    told = preset.resolve(fix=fix)
    same = {"seed": told.seed}
    if source is not None:  # a stored month replays the hours it holds: its span is the store's, not a change
        same.update(hours=told.hours, warmup_hours=told.warmup_hours)
    as_told = r.scenario.model_copy(update=same) == told
    if as_told and source is None:
        if r.scenario.seed == told.seed:
            return f"{name}: {preset.scenario.fix_story if fix else preset.scenario.story}"
        # The story's figures (26 cards) are its own seed's draw; another seed's month has its own.
        return f"{name}, seed {r.scenario.seed}: {describe_policy(r.figures)}"
    what = [] if as_told else ["with --set " + " --set ".join(overrides) if overrides else "changed"]
    if source is not None:
        what.append(f"on the month stored at {source}")
    return f"{name} {', '.join(what)}: {describe_policy(r.figures)}"


def render_verdict(console: Console, preset, fix: bool, r, overrides=(), span=None) -> None:
    """The verdict of one replayed month; `span` (a `fleet.presets.StoredSpan`) for a stored month, whose line then
    names the store and the hours replayed, not a seed."""
    f = r.figures
    source = f.get("source")
    console.print(f"[bold]{escape(headline(preset, fix, r, overrides, source))}[/bold]", highlight=False)
    where = f"seed {f['seed']}" if source is None else f"store {source}: {span.describe() if span else str(f['hours']) + ' hours'}"
    console.print(
        f"  policy: {f['card_class']} cards, {f['window']} window, {f['mode']} mode, headroom {f['headroom']:g}, "
        f"eviction {f['eviction_rule']} through the {f['eviction_window']} window (share {f['eviction_share']:g}, budget {f['eviction_budget']} of {f['pool_cards']}), {where}",
        highlight=False,
    )
    console.print(f"  {demand_line(f)}", highlight=False)
    t = Table(box=None, show_header=False, padding=(0, 2))
    tr = f.get("traffic")
    t.add_row("bill", _usd(f["bill_usd"]), f"warm rent {_usd(f['bill_warm_usd'])} + churn fees {_usd(f['bill_churn_usd'])}"
              + (f" + the reactive loop's cards {_usd(tr['reactive_usd'])}" if tr else ""))
    t.add_row("idle cost", _usd(f["idle_usd"]), f"{f['idle_share']:.1%} of the bill bought capacity that moved no tokens")
    t.add_row("demand", f"{f['demand_avg_tps']:,.0f} tok/s", f"average; peak {f['demand_peak_tps']:,.0f} tok/s")
    if tr:
        t.add_row("clock", f"{tr['step_minutes']}-minute steps", traffic_words(tr))
        t.add_row("lost", f"{tr['lost_share']:.2%}", f"of the month's tokens; {tr['served_late_share']:.2%} served late "
                  f"(wait p50 {tr['wait_p50_s']:.0f} s, p99 {tr['wait_p99_s']:.0f} s), the longest backlog {tr['drain_minutes_max']} min")
    else:
        t.add_row("delivered", f"{f['delivered_avg_tps']:,.0f} tok/s", f"unmet {f['unmet_avg_tps']:,.0f} tok/s ({f['unmet_share']:.2%}), short in {f['short_hours']} of {f['hours']} hours")
    if "goodput_share" in f:
        t.add_row("goodput", f"{f['goodput_avg_tps']:,.0f} tok/s", f"{f['goodput_share']:.1%} of delivered within the promise ({promise_words(f)}); "
                  f"outside it in {f['slow_hours']} of {f['hours']} hours")
    t.add_row("run set", f"{f['cards_warm_avg']:.2f} cards", f"average warm; max {f['cards_warm_max']}; {f['cards_used']} cards used"
              + (f"; the reactive loop kept {tr['loop_cards_avg']:.2f} more an hour on average (max {tr['loop_cards_max']})"
                 if tr and tr["reactive"] and "loop_cards_avg" in tr else ""))
    t.add_row("evictions", f"{f['evictions']} of {f['pool_cards']}", f"{f['wrong_evictions']} wrong ({f['wrong_eviction_share']:.0%})")
    t.add_row("ideal bill", _usd(f["ideal_bill_usd"]), f"convergence {f['convergence']:.1%}")
    console.print(t)
    for name, c in f["checks"].items():
        console.print(f"  {name:<12} {_mark(c['pass'])}  {c['mark']}", highlight=False)
    console.print()


def spread(rows: list[dict]) -> dict:
    """Median, 5th and 95th percentile, min and max of each figure, and each check's pass rate."""
    out: dict = {}
    promised = bool(rows) and "goodput_share" in rows[0]
    for key in (*SPREAD_FIGURES, *(("goodput_share",) if promised else ())):
        v = np.array([r[key] for r in rows], dtype=np.float64)
        out[key] = {
            "median": float(np.median(v)),
            "p05": float(np.percentile(v, 5)),
            "p95": float(np.percentile(v, 95)),
            "min": float(v.min()),
            "max": float(v.max()),
        }
    checks = ("capacity", "convergence", "eviction", *(("latency",) if promised else ()))
    out["pass_rate"] = {c: float(np.mean([r["checks"][c]["pass"] for r in rows])) for c in checks}
    first = rows[0] if rows else {}
    out["demand"] = {k: first.get(k) for k in ("knew_demand", "forecast", "forecast_quantile")}
    return out


def render_spread(console: Console, preset, fix: bool, n: int, first_seed: int, s: dict) -> None:
    console.print(f"[bold]{preset.name}{' (fix)' if fix else ''}[/bold]: {n} seeds from {first_seed}", highlight=False)
    console.print(f"  {demand_line(s.get('demand') or {})}", highlight=False)
    t = Table("figure", "median", "p05", "p95", "min", "max", box=None)
    for key in (k for k in (*SPREAD_FIGURES, "goodput_share") if k in s):
        v = s[key]
        fmt = "{:.1%}" if key in ("convergence", "unmet_share", "idle_share", "goodput_share") else "{:,.2f}" if key == "cards_warm_avg" else "{:,.0f}"
        t.add_row(key, *(fmt.format(v[q]) for q in ("median", "p05", "p95", "min", "max")))
    console.print(t)
    console.print("  pass rate: " + ", ".join(f"{c} {r:.0%}" for c, r in s["pass_rate"].items()), highlight=False)
    console.print()
