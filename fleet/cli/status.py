"""`fleet status` and `fleet explain CARD`: what the service decided, read from the store."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from fleet.cli.demand import forecast_beside_measured, knew_demand_line
from fleet.cli.plan import DbOption, _iso, grouped, percent, shown_url, times
from fleet.core.units import HOUR_S


def _open_store(db: str | None, config: str | None):
    """The config and the store it names, for reading: a store that is not there is an error, never created."""
    from fleet.service.config import load_service_config
    from storage.existing import existing_repository
    from storage.service_store import ServiceStore

    cfg = load_service_config(config, {"storage": {"url": db} if db else {}})
    repo = existing_repository(cfg.storage.url)
    return cfg, repo, ServiceStore(repo.engine)


def status_cmd(
    db: DbOption = None,
    config: Annotated[Optional[str], typer.Option("--config", help="Service config, for the checks' pass marks.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh until Ctrl-C: in place on a terminal, once an interval when piped.")] = False,
    interval: Annotated[float, typer.Option("--interval", help="With --watch: seconds between refreshes.", min=0.1)] = 5.0,
) -> None:
    """The run set, scores, budget left, the month-to-date bill by part and the three checks so far."""
    import time

    from rich.console import Group

    from fleet.cli.output import console as con

    cfg, repo, store = _open_store(db, config)
    if not watch:
        out, shown = _status(cfg, repo, store)
        if as_json:
            typer.echo(json.dumps(out, indent=2))
        else:
            _print(con, shown)
        return
    if not con.is_terminal:  # piped: one whole status an interval, each after a line saying when it was read
        while True:
            out, shown = _status(cfg, repo, store)
            if as_json:
                typer.echo(json.dumps(out))
            else:
                _print(con, [f"-- status at {_iso(time.time())} (every {interval:g} s; Ctrl-C stops)", *shown])
            sys.stdout.flush()
            time.sleep(interval)
    from rich.live import Live

    with Live(console=con, auto_refresh=False, screen=False) as live:
        while True:
            _out, shown = _status(cfg, repo, store)
            live.update(Group(f"status at {_iso(time.time())}, every {interval:g} s; Ctrl-C stops", *shown), refresh=True)
            time.sleep(interval)


def _print(con, shown: list) -> None:
    """Lines wrapped at a terminal's width (a pipe's console never wraps them), tables at the console's width."""
    for item in shown:
        if isinstance(item, str):
            con.print(item, markup=False, highlight=False)
        else:
            con.print(item)


CHECK_UNITS = {"capacity": lambda v: f"unmet {v:.2%} of demand", "convergence": lambda v: f"convergence {percent(v)}",
               "eviction": lambda v: times(int(v), "wrong eviction")}


def _status(cfg, repo, store) -> tuple[dict, list]:
    """The status as a JSON object and as lines and tables to print."""
    from rich.table import Table

    from fleet.core.verdict import checks, json_safe
    from fleet.service.scoring import IN_DIP_KEY, POLICY_SCORE_KEY
    from fleet.service.snapshot import month_totals
    from storage.values import SET_ASIDE_KINDS, Kind

    last_billed = store.last_billed_ts()
    if last_billed is None:
        from fleet.cli.output import UsageError

        raise UsageError(f"database {shown_url(cfg.storage.url)!r}: no billed hour yet (has `fleet serve` run on it?)")
    m0 = store.month_start_of(last_billed)
    hours = store.hours(m0)
    totals = month_totals(hours)
    last_dec = store.last_decided_ts(m0, 2**62) or last_billed
    size = store.decisions(kinds=[Kind.SIZE], since_ts=last_dec, until_ts=last_dec + 1, limit=1)
    detail = size[0].detail if size else {}
    run_set = sorted(store.run_set_at(last_dec))
    scores = store.scores_by_window(last_dec)
    parts = store.bill_by_part(m0, last_billed + HOUR_S)
    evicted = {k: ts for ts, k in store.eviction_hours(m0, last_dec + HOUR_S)}
    figs = {**totals, "wrong_evictions": int(totals["wrong_evictions"])}
    chk = checks(figs, cfg.checks)
    billed = store.decisions(kinds=[Kind.SIZE], since_ts=last_billed, until_ts=last_billed + 1, limit=1)
    billed_detail = billed[0].detail if billed else {}
    out = json_safe({
        "month_start": _iso(m0), "hours_billed": len(hours), "hour_decided": _iso(last_dec),
        "run_set": run_set, "run_set_cards": len(run_set), "demand_tps": detail.get("demand_tps"),
        "target_tps": detail.get("target_tps"), "scored_capacity_tps": detail.get("scored_capacity_tps"),
        "budget_left": detail.get("budget_left"), "evictions": int(totals["evictions"]),
        "evicted": {k: _iso(ts) for k, ts in evicted.items()},
        "bill_by_part_usd": parts, **{k: v for k, v in totals.items() if k.endswith("_usd") or k in ("convergence", "unmet_share")},
        "scores": {("policy" if w == 0 else "in_dip" if w == -1 else str(w)): s for w, s in scores.items()}, "checks": chk,
        "demand_forecast_tps": detail.get("demand_forecast_tps"), "knew_demand": bool(detail.get("knew_demand")),
        "last_billed": {"hour": _iso(last_billed), "demand_forecast_tps": billed_detail.get("demand_forecast_tps"),
                        "demand_measured_tps": hours[-1].demand_measured_tps if hours else None},
    })
    shown: list = [
        f"month from {out['month_start']}: {len(hours)} hours billed, decided through {out['hour_decided']}",
        f"run set: {len(run_set)} cards for {detail.get('demand_tps', 0):,.0f} tok/s demand "
        f"(target {detail.get('target_tps', 0):,.0f}, scored capacity {detail.get('scored_capacity_tps', 0):,.0f})",
        f"demand of {_iso(last_billed)} (last billed): "
        + forecast_beside_measured(billed_detail.get("demand_forecast_tps"), out["last_billed"]["demand_measured_tps"]),
        *knew_demand_line(detail),
        f"evictions: {out['evictions']}, budget left {out['budget_left']}",
        f"bill so far: ${totals['bill_usd']:,.2f} (rent ${parts.get('rent', 0):,.2f}, churn ${parts.get('churn', 0):,.2f})",
        f"idle ${totals['idle_usd']:,.2f}; ideal ${totals['ideal_bill_usd']:,.2f}; convergence {percent(totals['convergence'])}",
    ]
    for name, c in chk.items():
        shown.append(f"check {name}: {'pass' if c['pass'] else 'FAIL'} ({c['mark']}; now {CHECK_UNITS[name](c['value'])})")
    aside = store.decisions(kinds=list(SET_ASIDE_KINDS), since_ts=m0, limit=10_000)
    waiting = store.oldest_unacted_ts()
    out["set_aside"] = [{"time": _iso(r.ts), "kind": r.kind, "card": r.card_key, "decision": r.detail.get("decision_key"),
                         "tries": r.detail.get("tries"), "reason": r.reason} for r in aside]
    out["oldest_unacted_hour"] = None if waiting is None else _iso(waiting)
    if aside:
        shown.append(f"set aside this month ({len(aside)}): actions not carried out (`fleet journal --kind act-failed "
                     "--kind act-expired` for all)")
        t = Table("time", "kind", "card", "decision", "tries", box=None)
        for r in aside[-10:]:
            t.add_row(_iso(r.ts), r.kind, r.card_key or "-", str(r.detail.get("decision_key", "")), str(r.detail.get("tries", "-")))
        shown.append(t)
    if waiting is not None:
        shown.append(f"actions waiting: the oldest is of {_iso(waiting)}")
    from fleet.cli.card import mismatch_lines, retired_lines

    out["retired"], retired = retired_lines(store)
    out["reconcile"], disagree = mismatch_lines(store)
    shown.extend(retired + disagree)
    in_dip = scores.pop(IN_DIP_KEY, {})
    windows = sorted(scores)
    heads = ["policy score" if w == POLICY_SCORE_KEY else f"score {w}h" for w in windows]
    # The sizing reads the policy's score where there is one, else its window's: the order shown is that one's.
    size_w = POLICY_SCORE_KEY if POLICY_SCORE_KEY in scores else _window_hours(detail.get("window"), windows)
    key_head = heads[windows.index(size_w)] if size_w in windows else None
    classes = {k: c.class_name for k, c in repo.cards().items()}
    scored = {k for s in scores.values() for k in s}
    order = lambda k: (-scores[size_w].get(k, float("-inf")), k) if key_head else (k,)  # noqa: E731
    gone = {r["card"] for r in out["retired"]}
    table = Table("card", "class", *heads, "state", *(["in dip"] if in_dip else []), box=None)
    for k in sorted(scored - set(evicted), key=order):
        table.add_row(k, classes.get(k, ""), *[f"{scores[w].get(k, float('nan')):,.0f}" for w in windows],
                      "warm" if k in run_set else "retired" if k in gone else "spare", *(["yes" if k in in_dip else ""] if in_dip else []))
    shown.append(f"cards ({len(scored - set(evicted))}), sorted by {key_head or 'card id'}"
                 f"{', highest first' if key_head else ''}; scores in tok/s; warm: in the run set, spare: in the pool, not warm")
    shown.append(table)
    if evicted:
        gone = Table("card", "class", "evicted at", *heads, box=None)
        for k in sorted(evicted, key=lambda k: evicted[k]):
            gone.add_row(k, classes.get(k, ""), _iso(evicted[k]), *[f"{scores[w].get(k, float('nan')):,.0f}" for w in windows])
        shown.append(f"evicted this month ({len(evicted)}): out of the pool until the month ends")
        shown.append(gone)
    return out, shown


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
    from fleet.cli.output import UsageError
    from fleet.core.verdict import json_safe
    from storage.values import ACTION_KINDS, Kind

    cfg, repo, store = _open_store(db, None)
    cls = store.card_class(card)
    if cls is None:
        raise UsageError(f"card {card!r}: not in the database {shown_url(cfg.storage.url)!r}")
    own = store.decisions(card_key=card)
    passes = store.decisions(kinds=[Kind.EVICTION_PASS])
    lines = []
    evicted = [r for r in own if r.kind == Kind.EVICT]
    judged = []
    for p in passes:
        d = p.detail
        if card not in d.get("scores", {}):
            continue
        score = d["scores"][card]
        if card in d.get("evicted", []):
            verdict = "evicted"
        elif card in d.get("candidates", []):
            verdict = ("candidate, not evicted: the circuit breaker was open" if d.get("breaker_open")
                       else "candidate, not evicted: held back by the budget (month's or cards draining at once)")
        else:
            verdict = "kept: at or above the threshold"
        median = d.get("median_score_tps")
        if median is None or median != median:  # several classes: the card's own class's median
            median = d.get("class_median_score_tps", {}).get(cls, median)
        threshold = d.get("thresholds", {}).get(card, d.get("threshold_tps"))  # the rule's own line for this card
        judged.append({"ts": p.ts, "hour": d.get("hour"), "score_tps": score, "threshold_tps": threshold,
                       "median_score_tps": median, "window": d.get("window"), "verdict": verdict,
                       "budget_left_before": d.get("budget_left_before"), "pass_reason": p.reason})
    if evicted:
        e = evicted[-1]
        lines.append(f"{card} ({cls}) was evicted at {_iso(e.ts)} (hour {e.detail.get('hour')}): {grouped(e.reason)}")
    else:
        lines.append(f"{card} ({cls}) was not evicted" + (f"; judged in {times(len(judged), 'eviction pass', 'eviction passes')}" if judged else
                                                          "; no eviction pass judged it (it was never in the run set at one)"))
    for j in judged:
        lines.append(f"  {_iso(j['ts'])} hour {j['hour']}: scored {j['score_tps']:,.0f} tok/s through the {j['window']} window, "
                     f"threshold {j['threshold_tps']:,.0f} (median {j['median_score_tps']:,.0f}): {j['verdict']}")
    from fleet.cli.card import retired_lines

    retired, said = retired_lines(store, card)
    lines.extend(said)
    warm = [r for r in own if r.kind in (Kind.ADD, Kind.RELEASE)]
    last_dec = store.last_decided_ts(0, 2**62) or 0
    run_set = store.run_set_at(last_dec)
    now_warm = card in run_set
    released = sum(r.kind == Kind.RELEASE for r in warm)  # an eviction takes a card out of the run set too
    left = times(released + len(evicted)) + (f" ({len(evicted)} by eviction)" if evicted else "")
    lines.append(f"{card} is {'warm (in the run set)' if now_warm else 'not warm'}; it joined the run set "
                 f"{times(sum(r.kind == 'add' for r in warm))} and left it {left}")
    # Where its latest score puts it: the greedy takes the best tokens per dollar first (in one class, the best scores).
    ranking = None
    size = store.decisions(kinds=[Kind.SIZE], since_ts=last_dec, until_ts=last_dec + 1, limit=1)
    if size:
        from policies import window_hours

        w = window_hours(str(size[0].detail.get("window")))
        scores = store.scores_by_window(last_dec).get(w, {})
        if card in scores:
            order = sorted(scores, key=lambda k: -scores[k])
            ranking = {"window_hours": w, "score_tps": scores[card], "rank": order.index(card) + 1, "of": len(order),
                       "run_set_cards": len(run_set), "target_tps": size[0].detail.get("target_tps")}
            lines.append(f"  at {_iso(last_dec)} it scored {scores[card]:,.0f} tok/s through the {w}-hour window, rank "
                         f"{ranking['rank']} of {len(order)} scored cards; the run set held {len(run_set)} for a target of "
                         f"{ranking['target_tps']:,.0f} tok/s")
        d = size[0].detail
        ranking = {**(ranking or {}), "demand_forecast_tps": d.get("demand_forecast_tps"),
                   "demand_measured_tps": d.get("demand_measured_tps"), "knew_demand": bool(d.get("knew_demand"))}
        lines.append(f"  demand of {_iso(last_dec)}: {forecast_beside_measured(d.get('demand_forecast_tps'), d.get('demand_measured_tps'))}")
        lines.extend("  " + x for x in knew_demand_line(d))
    for r in warm[-5:]:
        lines.append(f"  {_iso(r.ts)} {r.kind}: {grouped(r.reason)}")
    unacted = [r for r in own if r.acted_ts is None and r.kind in ACTION_KINDS]
    if unacted:
        lines.append(f"  {len(unacted)} of its decisions are journaled and not yet acted on")
    if as_json:
        typer.echo(json.dumps(json_safe({
            "card": card, "card_class": cls, "evicted": bool(evicted), "warm": now_warm, "latest": ranking,
            "retired": retired[0] if retired else None,
            "eviction": None if not evicted else {"ts": evicted[-1].ts, "reason": evicted[-1].reason, **evicted[-1].detail},
            "judged": judged, "warm_changes": [{"ts": r.ts, "kind": r.kind, "reason": r.reason, "acted_ts": r.acted_ts} for r in warm],
        }), indent=2))
        return
    typer.echo("\n".join(lines))


def register(app: typer.Typer) -> None:
    app.command("status")(status_cmd)
    app.command("explain")(explain_cmd)
