"""`fleet plan`: what the service would decide for the coming hour, without doing it.

The plan is built by the service's own decide pipeline (`fleet.service.pipeline.
decide_pipeline`: the score job, what the pool is known to run, the core's step,
the journal's rows), so the plan and the service cannot disagree: the same code
reads the same inputs, a silent card and an action set aside included. What it
would write goes elsewhere: the store is opened read only, the scores a plan works
out are kept in memory, and the hour's rows are kept by a journal in memory. An
hour the service has not scored yet is scored the way its score job would, on the
telemetry stored so far.
"""

from __future__ import annotations

import json
import math
import time
from typing import Annotated, Optional

import typer

from fleet.cli.demand import KNEW_LINE, forecast_beside_measured
from fleet.cli.words import DbOption, grouped, iso_minute, shown_url, times
from fleet.core.errors import ConfigError
from fleet.core.units import HOUR_S, NO_END_TS


def _simulation_of(cfg, store, simulate: str | None, seed: int | None):
    """(config, simulation) for a store a simulation wrote: its preset from --simulate or from the store's identity."""
    from fleet.presets import load_preset
    from fleet.service.service import store_identity
    from fleet.service.simulation import Simulation, simulation_config

    held = store.identity.read()
    if simulate is None and (held is None or held.kind != "simulation"):
        return cfg, None
    name = simulate or held.preset
    try:
        preset = load_preset(name)
    except ConfigError as err:
        raise ConfigError(f"database {store.shown_url!r} holds {held.describe()}: give --simulate PRESET "
                          f"(its name or file) to plan it ({err})") from None
    scenario = preset.resolve(seed=seed if seed is not None else (held.seed if held is not None else None))
    cfg = simulation_config(cfg, scenario)
    sim = Simulation.of(scenario, cfg.month.start_ts, preset.path.parent if preset.path else None)
    if held is not None and not held.matches(store_identity(sim)):
        raise ConfigError(f"database {store.shown_url!r} holds {held.describe()}, not {store_identity(sim).describe()}")
    return cfg, sim


def plan_hour(cfg, store, sim=None, now_ts: float | None = None) -> dict:
    """The decisions the service would journal for the hour after the last one decided, as a JSON-ready dict
    (`store`: the `storage.open_store` store, only read)."""
    import policies
    from fleet.service.pipeline import DeclaredPool, KeptJournal, decide_pipeline, make_frame, policy_windows
    from fleet.service.readmodel import HourPlan, promise_of
    from fleet.service.simulation import SetClock

    parts = policies.resolve(cfg.policy)
    telemetry = store.telemetry if cfg.pool is None else DeclaredPool(store.telemetry, cfg.pool)
    now = time.time() if now_ts is None else now_ts
    clock = SetClock(now)
    frame = make_frame(cfg, parts, store, telemetry, clock, sim)
    cal = frame.calendar
    last_ts = store.journal.last_decided_ts(cal.start_ts, NO_END_TS)
    hour_ts = cal.next_hour(last_ts, now)
    if hour_ts > cal.last_hour_ts:  # a simulation plays one month; a real pool's months follow one another
        m0 = cal.month_of(last_ts)[0]
        return {"hour": None, "hour_ts": None, "database": shown_url(cfg.storage.url), "month_start": iso_minute(m0),
                "last_decided": iso_minute(last_ts), "month_decided_to_its_end": True}
    clock.t = max(now, hour_ts)  # the plan stands still at the hour it plans
    windows = policy_windows(parts)
    journal = KeptJournal()
    pipeline = decide_pipeline(cfg, frame, store, journal, windows, lambda _now: hour_ts, writes=False)
    marker = list(windows.values())[-1]
    scored_by = "the service"
    if (store.journal.last_scored_ts(marker, hour_ts, hour_ts + 1) or -1) < hour_ts:
        pipeline.scoring.score_hours(hour_ts, 1)  # into memory, on the telemetry stored so far
        scored_by = "this plan, on the telemetry stored so far (the service scores the hour once it has settled)"
    pipeline.decide.decide_hour(hour_ts)
    m0, h = cal.month_of(hour_ts)
    before = float(frame.demand.billed(m0, h - 1, 1)[1][0]) if h > 0 else None  # the hour before's, as measured so far
    _, entries, opened, closed, _retired = journal.written[0]
    planned = HourPlan(entries)
    run_set = sorted((store.journal.run_set_at(hour_ts - HOUR_S) - set(closed)) | set(opened))
    return {
        "hour": iso_minute(hour_ts), "hour_ts": hour_ts, "month_hour": planned.size.record.hour, "scored_by": scored_by,
        "database": shown_url(cfg.storage.url), "run_set": run_set, "run_set_cards": len(run_set),
        **planned.as_json(), "promise": promise_of(planned.size.record),
        "entries": [{"key": e.key, "kind": e.kind, "card": e.card_key, "reason": e.reason} for e in entries],
        "demand_measured_before_tps": before if before is not None and math.isfinite(before) else None,
    }


def _render(p: dict) -> list[str]:
    from fleet.cli.status import promise_lines
    from storage.records import SizeRecord

    if p.get("month_decided_to_its_end"):
        return [f"nothing to plan on {p['database']}: its month from {p['month_start']} is decided to its last hour "
                f"({p['last_decided']}), and a simulation plays one month"]
    s = p["size"]
    lines = [
        f"plan for {p['hour']} (month hour {p['month_hour']}) on {p['database']}; nothing journaled or acted",
        f"  scored by {p['scored_by']}",
        f"run set: {times(p['run_set_cards'], 'card')} for {s['demand_tps']:,.0f} tok/s demand (target {s['target_tps']:,.0f}, "
        f"scored capacity {s['scored_capacity_tps']:,.0f}); eviction budget left {s['budget_left']}",
    ]
    lines.append(f"demand: {forecast_beside_measured(s.get('demand_forecast_tps'), None)}; the hour before measured "
                 f"{'nothing' if p.get('demand_measured_before_tps') is None else format(p['demand_measured_before_tps'], ',.0f') + ' tok/s'}")
    lines.extend([KNEW_LINE] if s.get("knew_demand") else [])
    lines.extend(promise_lines(SizeRecord.from_detail(s), {}))
    ev = p["eviction_pass"]
    if ev is None:
        lines.append("eviction pass: none this hour (not a decision hour of the rule's cadence, no budget left, or no rule)")
    else:
        lines.append(f"eviction pass ({ev['rule']}, {ev['window']} window): judged {times(ev['judged'], 'card')}, threshold "
                     f"{ev['threshold_tps']:,.0f} tok/s (the median {ev['median_score_tps']:,.0f}); "
                     f"budget {ev['budget_left_before']} -> {ev['budget_left_after']}: {grouped(ev['reason'])}")
        for k in ev["candidates"]:
            what = "evict" if k in ev["evicted"] else "held back"
            line = ev.get("thresholds", {}).get(k)
            under = f" under its threshold {line:,.0f}" if line is not None else ""
            lines.append(f"  candidate {k}: scored {ev['scores'].get(k, float('nan')):,.0f} tok/s{under} -> {what}")
    for kind in ("evict", "release", "add"):
        for d in p[kind]:
            lines.append(f"{kind} {d['card']}: {grouped(d['reason'])}")
    if not (p["add"] or p["release"] or p["evict"]):
        lines.append("no card to add, release or evict")
    return lines


def plan_cmd(
    db: DbOption = None,
    config: Annotated[Optional[str], typer.Option("--config", help="Service config (TOML): the pool's policy, demand and month.")] = None,
    simulate: Annotated[Optional[str], typer.Option("--simulate", help="The preset a simulated store plays (default: the one its identity names).")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="With --simulate: the seed the month was drawn with (default: the store's).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """What the service would decide for the coming hour on the stored pool (run set, cards to add and release, the eviction pass), without journaling or acting."""
    from fleet.core.verdict import json_safe
    from fleet.service.config import load_service_config
    from storage import open_store

    cfg = load_service_config(config, {"storage": {"url": db} if db else {}})
    store = open_store(cfg.storage.url, read_only=True)  # a plan reads the store and never writes it
    try:
        cfg, sim = _simulation_of(cfg, store, simulate, seed)
        if sim is None:
            cfg.require_pool(f"config file {config!r}" if config else "the service config (give --config FILE)")
        p = plan_hour(cfg, store, sim)
    finally:
        store.close()
    if as_json:
        typer.echo(json.dumps(json_safe(p), indent=2))
        return
    typer.echo("\n".join(_render(p)))


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
