"""`fleet status` and `fleet explain CARD`: what the service decided, read from the store."""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Optional

import typer

from fleet.cli.demand import forecast_beside_measured
from fleet.cli.words import DbOption, grouped, iso_minute, percent, shown_url, times
from fleet.core.units import HOUR_S


def _open_store(db: str | None, config: str | None):
    """The config and the store it names, for reading (a store that is not there is an error, never created), and
    whether it is a real pool's (its demand measured, an hour of it possibly not)."""
    from fleet.service.config import load_service_config
    from storage import open_store

    cfg = load_service_config(config, {"storage": {"url": db} if db else {}})
    store = open_store(cfg.storage.url, read_only=True)  # a reader: it never writes the store, which may be read-only
    identity = store.identity.read()
    return cfg, store.telemetry, store.journal, identity is not None and identity.kind == "pool"


def status_cmd(
    db: DbOption = None,
    config: Annotated[Optional[str], typer.Option("--config", help="Service config, for the checks' pass marks.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh until Ctrl-C: in place on a terminal, once an interval when piped.")] = False,
    interval: Annotated[float, typer.Option("--interval", help="With --watch: seconds between refreshes.", min=0.1)] = 5.0,
) -> None:
    """The run set, scores, budget left, the month-to-date bill by part and the checks so far (under a promise, its
    goodput and the fourth check, latency)."""
    import time

    from rich.console import Group

    from fleet.cli.output import console as con

    cfg, repo, store, real_pool = _open_store(db, config)
    if not watch:
        out, shown = _status(cfg, repo, store, real_pool)
        if as_json:
            typer.echo(json.dumps(out, indent=2))
        else:
            _print(con, shown)
        return
    if not con.is_terminal:  # piped: one whole status an interval, each after a line saying when it was read
        while True:
            out, shown = _status(cfg, repo, store, real_pool)
            if as_json:
                typer.echo(json.dumps(out))
            else:
                _print(con, [f"-- status at {iso_minute(time.time())} (every {interval:g} s; Ctrl-C stops)", *shown])
            sys.stdout.flush()
            time.sleep(interval)
    from rich.live import Live

    with Live(console=con, auto_refresh=False, screen=False) as live:
        while True:
            _out, shown = _status(cfg, repo, store, real_pool)
            live.update(Group(f"status at {iso_minute(time.time())}, every {interval:g} s; Ctrl-C stops", *shown), refresh=True)
            time.sleep(interval)


def _print(con, shown: list) -> None:
    """Lines wrapped at a terminal's width (a pipe's console never wraps them), tables at the console's width."""
    for item in shown:
        if isinstance(item, str):
            con.print(item, markup=False, highlight=False)
        else:
            con.print(item)


CHECK_UNITS = {"capacity": lambda v: f"unmet {v:.2%} of demand", "convergence": lambda v: f"convergence {percent(v)}",
               "eviction": lambda v: times(int(v), "wrong eviction"),
               "latency": lambda v: f"{v:.1%} of delivered within the promise"}
PROMISED_UNITS = {"capacity": lambda v: f"{v:.2%} of demand not served within the promise"}
"""Under a promise the capacity check reads the demand not served within it (`fleet.core.verdict.checks`)."""


def _status(cfg, repo, store, real_pool) -> tuple[dict, list]:
    """The status as a JSON object and as lines and tables to print, from the read model's month on view."""
    from fleet.service.readmodel import MonthView

    view = MonthView.on_view(store, measured_demand=real_pool)
    if view is None:
        from fleet.cli.output import UsageError

        raise UsageError(f"database {shown_url(cfg.storage.url)!r}: no hour decided yet (has `fleet serve` run on it?)")
    out = _month_json(view, cfg.checks)
    out["decisions"] = view.action_counts()
    shown = _month_lines(view, out) if view.hours else _unbilled_lines(view, out, cfg.schedule.billing_every_s)
    shown.extend(_reactive_lines(view, out))
    shown.extend(promise_lines(view.size, out))
    if real_pool:
        shown.extend(_demand_source_lines(view, repo, out))
    shown.extend(_set_aside(view, out))
    from fleet.cli.card import mismatch_lines, retired_lines

    out["retired"], retired = retired_lines(store)
    out["reconcile"], disagree = mismatch_lines(store)
    shown.extend(retired + disagree)
    shown.extend(_card_tables(view, repo, {r["card"] for r in out["retired"]}))
    return out, shown


def _month_json(view, marks) -> dict:
    """The month on view as `fleet status --json` gives it (before its set-aside, retired and reconcile parts)."""
    from fleet.core.verdict import json_safe
    from storage.values import score_key_label

    size, billed, totals = view.size, view.billed_size, view.totals
    judged = view.figures  # idle, ideal and convergence over the hours whose demand was measured (the bill over all)
    return json_safe({
        "month_start": iso_minute(view.month_start_ts), "hours_billed": len(view.hours), "hour_decided": iso_minute(view.last_decided_ts),
        "run_set": view.run_set, "run_set_cards": len(view.run_set), "demand_tps": size and size.demand_tps,
        "target_tps": size and size.target_tps, "scored_capacity_tps": size and size.scored_capacity_tps,
        "budget_left": size and size.budget_left, "evictions": int(totals["evictions"]),
        "evicted": {k: iso_minute(ts) for k, ts in view.evicted.items()},
        "bill_by_part_usd": view.bill_by_part(),
        **{k: v for k, v in totals.items() if k.endswith("_usd") or k in ("convergence", "unmet_share")},
        **{k: judged[k] for k in JUDGED},
        **{k: judged[k] for k in PROMISED if k in judged},
        "scores": {score_key_label(w): s for w, s in view.scores_by_window.items()}, "checks": view.checks(marks),
        "demand_forecast_tps": size and size.demand_forecast_tps, "knew_demand": bool(size and size.knew_demand),
        "last_billed": None if not view.hours else {
            "hour": iso_minute(view.last_billed_ts), "demand_forecast_tps": billed and billed.demand_forecast_tps,
            "demand_measured_tps": view.hours[-1].demand_measured_tps},
        "hours_unmeasured": len(view.unmeasured_hours),
    })


JUDGED = ("idle_usd", "ideal_bill_usd", "convergence", "unmet_share")
"""The figures judged against demand: read over the billed hours whose demand was measured. The bill's own figures
count every billed hour: its rent was paid whatever the demand."""

PROMISED = ("goodput_avg_tps", "goodput_share", "unmet_goodput_share")
"""Under a promise (hours billed with their goodput), what was served within it, judged as `JUDGED` is."""


def _unmeasured_line(view) -> list[str]:
    """One line when billed hours of a real pool had no demand measured: the demand source was down (or silent)."""
    gone = view.unmeasured_hours
    if not gone:
        return []
    measured = [h.hour_ts for h in view.hours if h.demand_measured_tps is not None]
    last = f"last measured {iso_minute(measured[-1])}" if measured else "none measured this month"
    return [f"demand: {times(len(gone), 'billed hour')} unmeasured ({iso_minute(gone[0].hour_ts)} to "
            f"{iso_minute(gone[-1].hour_ts)}; {last}): no demand source answered; their rent is billed, idle, ideal "
            "and the checks skip them"]


def _source_line(repo) -> tuple[str | None, str]:
    """When the demand source last answered (its newest sample in the store), as JSON and as `status`'s line."""
    last = repo.last_demand_sample_ts()
    if last is None:
        return None, "demand source: none has answered (no demand sample stored): demand is what the pool served"
    return iso_minute(last), f"demand source: last answered {iso_minute(last)} (its newest sample)"


def _demand_source_lines(view, repo, out: dict) -> list[str]:
    """A real pool's lines on its demand source: when it last answered, and the billed hours whose demand is what
    the pool served alone (telemetry came, no demand source measured any of it: the demand was at least that)."""
    from fleet.service.demand import served_alone, stretches

    out["demand_source_last_answered"], said = _source_line(repo)
    got = repo.demand_hours(view.month_start_ts, view.last_billed_ts + HOUR_S) if view.hours else {}
    alone = [h.hour_ts for h in view.hours if served_alone(got.get(h.hour_ts))]
    out["hours_served_alone"] = len(alone)
    if not alone:
        return [said]
    return [said, f"demand: {times(len(alone), 'billed hour')} read from what the pool served alone "
                  f"({stretches(alone)}): no demand source measured them; their demand was at least that"]


def _run_set_line(cards: int, demand_tps: float, target_tps: float, scored_tps: float) -> str:
    """The run set and what it was sized to; a cold start with no demand seen (an infinite target) in words."""
    if not math.isfinite(target_tps):
        return f"run set: {cards} cards, every card (no demand seen yet to size for; scored capacity {scored_tps:,.0f})"
    return (f"run set: {cards} cards for {demand_tps:,.0f} tok/s demand "
            f"(target {target_tps:,.0f}, scored capacity {scored_tps:,.0f})")


def _month_lines(view, out: dict) -> list:
    """The month's lines: hours, run set, demand, evictions, the bill and the checks."""
    from fleet.cli.demand import KNEW_LINE

    size, totals = view.size, view.totals
    tps = lambda name: getattr(size, name, None) or 0  # noqa: E731  (an hour without a size record shows 0)
    shown: list = [
        f"month from {out['month_start']}: {len(view.hours)} hours billed, decided through {out['hour_decided']}",
        _run_set_line(len(view.run_set), tps('demand_tps'), tps('target_tps'), tps('scored_capacity_tps')),
        f"demand of {out['last_billed']['hour']} (last billed): "
        + forecast_beside_measured(out["last_billed"]["demand_forecast_tps"], out["last_billed"]["demand_measured_tps"]),
        *([KNEW_LINE] if out["knew_demand"] else []),
        f"evictions: {out['evictions']}, budget left {out['budget_left']}",
        # The month's totals, as replay reports them: the bill lines summed apart can round a cent the other way.
        f"bill so far: ${totals['bill_usd']:,.2f} (rent ${totals['bill_warm_usd']:,.2f}, "
        f"churn ${totals['bill_churn_usd']:,.2f})",
        f"idle ${out['idle_usd']:,.2f}; ideal ${out['ideal_bill_usd']:,.2f}; convergence {percent(out['convergence'])}"
        + (f" (over the {len(view.hours) - len(view.unmeasured_hours)} hours with demand measured)"
           if view.unmeasured_hours else ""),
        *_unmeasured_line(view),
        *([f"goodput {out['goodput_avg_tps']:,.0f} tok/s, {out['goodput_share']:.1%} of delivered within the promise"]
          if "goodput_share" in out else []),
    ]
    units = {**CHECK_UNITS, **(PROMISED_UNITS if "goodput_share" in out else {})}
    for name, c in out["checks"].items():
        shown.append(f"check {name}: {'pass' if c['pass'] else 'FAIL'} ({c['mark']}; now {units[name](c['value'])})")
    return shown


def _unbilled_lines(view, out: dict, billing_every_s: float) -> list:
    """The month's lines before its first bill: the hours decided, the run set and the demand it was sized to; the
    bill and the checks come once an hour is billed."""
    from fleet.cli.demand import KNEW_LINE

    size = view.size
    tps = lambda name: getattr(size, name, None) or 0  # noqa: E731  (an hour without a size record shows 0)
    return [
        f"month from {out['month_start']}: no hour billed yet, decided through {out['hour_decided']}",
        _run_set_line(len(view.run_set), tps('demand_tps'), tps('target_tps'), tps('scored_capacity_tps')),
        f"demand of {out['hour_decided']} (last decided): "
        + forecast_beside_measured(size and size.demand_forecast_tps, size and size.demand_measured_tps),
        *([KNEW_LINE] if out["knew_demand"] else []),
        f"evictions: {out['evictions']}, budget left {out['budget_left']}",
        _decided_line(out["decisions"]),
        "bill: none yet; the billing job bills each decided hour once it has ended and its telemetry has settled "
        f"(it runs every {billing_every_s:g} s); the checks come with it",
    ]


def _reactive_lines(view, out: dict) -> list[str]:
    """The reactive loop's adds within the hour the plan is in: into `out`, and a line with the latest's reason."""
    adds = view.reactive_adds
    out["reactive_adds"] = [{"time": iso_minute(r.ts), "card": r.card_key, "reason": r.reason,
                             "held_until": iso_minute(r.record.held_until_ts)} for r in adds]
    if not adds:
        return []
    last = adds[-1]
    return [f"reactive adds since {out['hour_decided']}: {len(adds)} ({', '.join(r.card_key for r in adds)}); "
            f"the latest at {iso_minute(last.ts)}, held until {iso_minute(last.record.held_until_ts)}: {last.reason}"]


def promise_lines(size, out: dict) -> list[str]:
    """The promise's lines (`status`, `plan`): what the hour was sized to, what the run set is expected to give at
    the hour's demand, and the cards added for latency rather than tokens. Into `out` as `promise`."""
    from fleet.core.latency import Slo, describe_slo
    from fleet.service.readmodel import promise_of

    out["promise"] = got = promise_of(size)
    if got is None:
        return []
    words = describe_slo(Slo(stream_tps=got["stream_tps"], ttft_ms=got["ttft_ms"], percentile=got["percentile"] or 0.99))
    p = f"p{(got['percentile'] or 0.99) * 100:g}"
    stream, ttft = got["stream_expected_tps"], got["ttft_expected_s"]
    expected = [f"the slowest stream {stream:,.1f} tok/s" if stream is not None else None,
                f"a first token within {ttft:,.2f} s at {p}" if ttft is not None else
                "first tokens beyond what its slots carry" if got["ttft_beyond_slots"] else None]
    lines = [f"promise: {words}; the run set's rate at it {got['run_set_rate_at_promise_tps'] or 0:,.0f} tok/s, "
             f"expected at the demand: {', '.join(e for e in expected if e) or 'nothing to read'}"]
    if got["added_for_latency"]:
        lines.append(f"added for latency, not tokens: {', '.join(got['added_for_latency'])} (the tokens were covered, "
                     "the first token's slots were not)")
    return lines


def _decided_line(counts: dict) -> str:
    """`decisions so far: 2 adds, 1 release, 0 evictions; 3 acted` (`fleet journal` lists them)."""
    said = ", ".join(times(counts.get(k, {}).get("decided", 0), k[:-1] if k.endswith("s") else k)
                     for k in ("adds", "releases", "evictions"))
    acted = sum(c["acted"] for c in counts.values())
    return f"decisions so far: {said}; {acted} acted (`fleet journal` lists them)"


def _set_aside(view, out: dict) -> list:
    """The month's actions set aside and the oldest waiting: into `out`, and as lines and a table."""
    from rich.table import Table

    aside = view.set_aside
    waiting = view.store.oldest_unacted_ts()
    out["set_aside"] = [{"time": iso_minute(r.ts), "kind": r.kind, "card": r.card_key, "decision": rec.decision_key,
                         "tries": rec.tries, "reason": r.reason} for r, rec in aside]
    out["oldest_unacted_hour"] = None if waiting is None else iso_minute(waiting)
    shown: list = []
    if aside:
        shown.append(f"set aside this month ({len(aside)}): actions not carried out (`fleet journal --kind act-failed "
                     "--kind act-expired` for all)")
        t = Table("time", "kind", "card", "decision", "tries", box=None)
        for r, rec in aside[-10:]:
            t.add_row(iso_minute(r.ts), r.kind, r.card_key or "-", str(rec.decision_key or ""), str("-" if rec.tries is None else rec.tries))
        shown.append(t)
    if waiting is not None:
        shown.append(f"actions waiting: the oldest is of {iso_minute(waiting)}")
    return shown


def _card_tables(view, repo, retired: set[str]) -> list:
    """The cards of the pool with their scores at the last decided hour (in the order the sizing reads them), and
    the month's evicted cards."""
    from rich.table import Table

    from storage.values import ScoreKey

    scores = dict(view.scores_by_window)
    in_dip = scores.pop(ScoreKey.IN_DIP, {})
    evicted = view.evicted
    windows = sorted(scores)
    heads = ["policy score" if w == ScoreKey.POLICY else f"score {w}h" for w in windows]
    # The sizing reads the policy's score where there is one, else its window's: the order shown is that one's.
    size_w = ScoreKey.POLICY if ScoreKey.POLICY in scores else _window_hours(view.size and view.size.window, windows)
    key_head = heads[windows.index(size_w)] if size_w in windows else None
    classes = {k: c.class_name for k, c in repo.cards().items()}
    scored = {k for s in scores.values() for k in s}
    order = lambda k: (-scores[size_w].get(k, float("-inf")), k) if key_head else (k,)  # noqa: E731
    table = Table("card", "class", *heads, "state", *(["in dip"] if in_dip else []), box=None)
    for k in sorted(scored - set(evicted), key=order):
        table.add_row(k, classes.get(k, ""), *[f"{scores[w].get(k, float('nan')):,.0f}" for w in windows],
                      "warm" if k in view.run_set else "retired" if k in retired else "spare",
                      *(["yes" if k in in_dip else ""] if in_dip else []))
    shown: list = [f"cards ({len(scored - set(evicted))}), sorted by {key_head or 'card id'}"
                   f"{', highest first' if key_head else ''}; scores in tok/s; warm: in the run set, spare: in the pool, not warm",
                   table]
    if evicted:
        gone = Table("card", "class", "evicted at", *heads, box=None)
        for k in sorted(evicted, key=lambda k: evicted[k]):
            gone.add_row(k, classes.get(k, ""), iso_minute(evicted[k]), *[f"{scores[w].get(k, float('nan')):,.0f}" for w in windows])
        shown.append(f"evicted this month ({len(evicted)}): out of the pool until the month ends")
        shown.append(gone)
    return shown


def _window_hours(name, windows: list[int]) -> int | None:
    if name is None:
        return windows[0] if windows else None
    from policies import window_hours

    return window_hours(str(name))


def explain_cmd(
    card: Annotated[str, typer.Argument(help="The card id, as its telemetry names it.")],
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Why a card was or was not evicted, and why it was or was not kept warm, from the decision journal."""
    from dataclasses import asdict

    from fleet.cli.card import retired_lines
    from fleet.cli.output import UsageError
    from fleet.core.verdict import json_safe
    from fleet.service.readmodel import CardView

    cfg, repo, store, real_pool = _open_store(db, None)
    cls = repo.card_class(card)
    if cls is None:
        raise UsageError(f"card {card!r}: not in the database {shown_url(cfg.storage.url)!r}")
    view = CardView(store, card, cls)
    retired, said = retired_lines(store, card)
    lines, latest = _explained(view, said)
    answered = None
    if real_pool:
        answered, source = _source_line(repo)
        lines.append(f"  {source}")
    if as_json:
        evicted = view.evictions
        typer.echo(json.dumps(json_safe({
            "card": card, "card_class": cls, "evicted": bool(evicted), "warm": view.warm, "latest": latest,
            **({"demand_source_last_answered": answered} if real_pool else {}),
            "retired": retired[0] if retired else None,
            # the eviction's stored record, passed on as stored (as `fleet journal --json` does)
            "eviction": None if not evicted else {"ts": evicted[-1].ts, "reason": evicted[-1].reason, **evicted[-1].detail},
            "judged": [asdict(j) for j in view.judged],
            "warm_changes": [{"ts": r.ts, "kind": r.kind, "reason": r.reason, "acted_ts": r.acted_ts,
                              "outcome": view.outcome(r), **_promise_of(r)} for r in view.warm_changes],
        }), indent=2))
        return
    typer.echo("\n".join(lines))


def _explained(view, retired_said: list[str]) -> tuple[list[str], dict | None]:
    """`fleet explain`'s lines, and its `latest` (where the card's latest score ranks it, the demand of that hour)."""
    from storage.values import Kind

    card, evicted, judged = view.card, view.evictions, view.judged
    if evicted:
        e = evicted[-1]
        lines = [f"{card} ({view.card_class}) was evicted at {iso_minute(e.ts)} (hour {e.record.hour}): {grouped(e.reason)}"]
    else:
        lines = [f"{card} ({view.card_class}) was not evicted"
                 + (f"; judged in {times(len(judged), 'eviction pass', 'eviction passes')}" if judged else
                    "; no eviction pass judged it (it was never in the run set at one)")]
    for j in judged:
        lines.append(f"  {iso_minute(j.ts)} hour {j.hour}: scored {j.score_tps:,.0f} tok/s through the {j.window} window, "
                     f"threshold {j.threshold_tps:,.0f} (median {j.median_score_tps:,.0f}): {j.verdict}")
    lines.extend(retired_said)
    left = times(view.times_moved(Kind.RELEASE) + len(evicted)) + (f" ({len(evicted)} by eviction)" if evicted else "")
    lines.append(f"{card} is {'warm (in the run set)' if view.warm else 'not warm'}; it joined the run set "
                 f"{times(view.times_moved(Kind.ADD))} and left it {left}")
    latest = _latest(view, lines)
    for r in view.warm_changes[-5:]:
        outcome = view.outcome(r)
        said = "" if outcome == "acted" else f" ({'not yet acted on' if outcome == 'waiting' else outcome})"
        lines.append(f"  {iso_minute(r.ts)} {r.kind}{said}{_at_promise(r)}: {grouped(r.reason)}")
    lines.extend(f"  {line}" for line in _not_carried_out(view.outcomes()))
    return lines, latest


def _at_promise(row) -> str:
    """An add's words under a promise: for latency or tokens, at its rate at the promise (empty: no promise)."""
    rec = row.record
    rate = getattr(rec, "rate_at_promise_tps", None)
    if rate is None:
        return ""
    return f" ({'for latency' if rec.for_latency else 'for tokens'}; its rate at the promise {rate:,.0f} tok/s)"


def _promise_of(row) -> dict:
    """An add's figures under a promise, as JSON (empty: none)."""
    rate = getattr(row.record, "rate_at_promise_tps", None)
    return {} if rate is None else {"rate_at_promise_tps": rate, "for_latency": row.record.for_latency}


NOT_CARRIED_OUT = {  # outcome -> (said of one decision, said of several)
    "expired": ("expired before it was carried out", "expired before they were carried out"),
    "set-aside": ("was set aside after failed tries", "were set aside after failed tries"),
    "waiting": ("is journaled and not yet acted on", "are journaled and not yet acted on"),
}


def _not_carried_out(outcomes: dict[str, int]) -> list[str]:
    """A line for each outcome other than `acted` that some of a card's decisions came to."""
    return [f"{n} of its decisions {NOT_CARRIED_OUT[k][n != 1]}" for k, n in outcomes.items()]


def _latest(view, lines: list[str]) -> dict | None:
    """Where the card's latest score puts it (the greedy takes the best tokens per dollar first; in one class, the
    best scores) and the demand of that hour, as JSON; its lines go onto `lines`."""
    from fleet.cli.demand import KNEW_LINE

    size, rank, at = view.size, view.rank, iso_minute(view.last_decided_ts)
    if size is None:
        return None
    latest = {}
    if rank is not None:
        latest = {"window_hours": rank.window_hours, "score_tps": rank.score_tps, "rank": rank.rank, "of": rank.of,
                  "run_set_cards": len(view.run_set), "target_tps": size.target_tps}
        lines.append(f"  at {at} it scored {rank.score_tps:,.0f} tok/s through the {rank.window_hours}-hour window, rank "
                     f"{rank.rank} of {rank.of} scored cards; the run set held {len(view.run_set)} for "
                     + (f"a target of {size.target_tps:,.0f} tok/s" if math.isfinite(size.target_tps) else
                        "every card (no demand seen yet to size for)"))
    latest.update({"demand_forecast_tps": size.demand_forecast_tps, "demand_measured_tps": size.demand_measured_tps,
                   "knew_demand": size.knew_demand})
    if size.promised:
        promise: dict = {}
        said = promise_lines(size, promise)
        own = size.rate_at_promise_tps.get(view.card)
        latest["promise"] = {**promise["promise"], "card_rate_at_promise_tps": own}
        lines.extend("  " + x for x in said)
        if own is not None:
            lines.append(f"  its rate at the promise {own:,.0f} tok/s (in the run set of {at})")
    lines.append(f"  demand of {at}: {forecast_beside_measured(size.demand_forecast_tps, size.demand_measured_tps)}")
    lines.extend("  " + x for x in ([KNEW_LINE] if size.knew_demand else []))
    return latest


def register(app: typer.Typer) -> None:
    app.command("status")(status_cmd)
    app.command("explain")(explain_cmd)
