"""`fleet plan` and `fleet serve --check`: what the service would do, without doing it.

`fleet plan` decides the coming hour on the stored pool through the service's
own decide job (`fleet.service.decide.DecideJob.decide_hour`, which runs the
core's `tick` on the state it reads from the store), so the plan and the
service cannot disagree: the same code reads the same inputs. What it would
write goes elsewhere. The job gets a journal that keeps the hour's rows in
memory instead of writing them, and a view of the store that reads and keeps
any score it works out in memory. The view lets through only the reads the
jobs make, so a write can never reach the store. An hour the service has not
scored yet is scored the way its score job would, on the telemetry stored so
far.

`fleet serve --check` validates the config and reaches what the service
would use: the store (read only) and the Prometheus server, each within a
bounded time. It prints one line for each check.
"""

from __future__ import annotations

import json
import math
import re
import sys
import threading
import time
from datetime import datetime, timezone
from typing import Annotated, Callable, Optional

import typer

from fleet.cli.demand import KNEW_LINE, forecast_beside_measured
from fleet.core.errors import ConfigError
from fleet.core.units import HOUR_S, NO_END_TS


def shown_url(url: str) -> str:
    """`storage.db.shown_url` (the URL, password masked), imported when first used: SQLAlchemy is not loaded at start."""
    from storage.db import shown_url as shown

    return shown(url)



def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


DbOption = Annotated[Optional[str], typer.Option("--db", envvar="FLEET_DB", show_envvar=True,
                                                  help="Database URL (beats the config's storage url; FLEET_DB gives it too).")]


def percent(value: float, none: str = "n/a until the first billed hour") -> str:
    """A share as a percentage, or what stands for it while there is nothing to divide (no hour billed)."""
    return none if value != value else f"{value:.1%}"


def times(n: int, what: str = "time", plural: str | None = None) -> str:
    """`1 time`, `0 times`, `2 eviction passes`: a count with its noun in the number it takes."""
    return f"{n} {what}" if n == 1 else f"{n} {plural or what + 's'}"


_BARE_NUMBER = re.compile(r"(?<![\w.,:/\-])(\d{4,})(?![\w.,:/%\-])")


def grouped(text: str) -> str:
    """`text` with its bare whole numbers of four digits or more grouped by thousands (`2867` -> `2,867`), so a
    journaled reason reads in the same number format as the lines around it; times, ids and decimals are left."""
    return _BARE_NUMBER.sub(lambda m: f"{int(m.group(1)):,}", text)


CHECK_TIMEOUT_S = 5.0
READS = frozenset({
    "last_decided_ts", "eviction_hours", "run_set_at", "decisions", "scores_at", "last_scored_ts", "rollup_means",
    "card_count", "retired", "scores_by_window", "last_rollup_ts", "month_start_of", "card_class", "demand_hours",
})


class ReadOnlyStore:
    """The service store seen by a plan: its reads pass through; the scores a plan works out are kept in memory."""

    def __init__(self, store):
        self._store = store
        self.scored: list = []

    def record_scores(self, hour_scores) -> None:
        self.scored.extend(hour_scores)

    def __getattr__(self, name: str):
        if name not in READS:
            raise AttributeError(f"a plan reads the store and never writes it (asked for {name!r})")
        return getattr(self._store, name)


class KeptJournal:
    """Stands where the decide job's journal does: the hour's rows and run-set changes are kept, not written."""

    def __init__(self):
        self.written: list[tuple] = []

    def write(self, hour_ts, entries, open_cards, close_cards, retire_cards) -> None:
        self.written.append((hour_ts, list(entries), dict(open_cards), list(close_cards), list(retire_cards)))


class DeclaredPool:
    """The store's classes and cards as `fleet serve` sees them once it has declared the config's pool (each class's
    rated rate and rent, the cards it names), read without writing anything: a store that only ingested telemetry
    holds its classes without a rent until serve writes the config's, and the plan must be what serve then decides."""

    def __init__(self, repo, pool):
        self._repo = repo
        self._pool = pool

    def __getattr__(self, name):
        return getattr(self._repo, name)

    def classes(self) -> dict:
        from storage.values import class_specs

        got = dict(self._repo.classes())
        got.update({c.name: c for c in class_specs(self._pool.classes)})  # as `declare_classes` updates them
        return got

    def cards(self) -> dict:
        from dataclasses import replace

        from storage.values import CardInfo

        classes = self.classes()
        got = {k: replace(c, rated_tps=classes[c.class_name].rated_tps) if c.class_name in classes else c
               for k, c in self._repo.cards().items()}
        next_id = max((c.id for c in got.values()), default=0) + 1
        for card in self._pool.cards:  # as `declare_cards` adds them: new ids after the store's, a known card kept
            if card.card_id not in got:
                spec = classes.get(card.card_class)
                got[card.card_id] = CardInfo(next_id, card.card_id, card.card_class, spec.rated_tps if spec else None)
                next_id += 1
        return got


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


def plan_hour(cfg, db, sim=None, now_ts: float | None = None) -> dict:
    """The decisions the service would journal for the hour after the last one decided, as a JSON-ready dict
    (`db`: the `storage.open_store` store, only read)."""
    import policies
    from fleet.service.decide import DecideJob
    from fleet.service.demand import service_demand
    from fleet.service.pool import PoolWatch
    from fleet.service.readmodel import HourPlan
    from fleet.service.scoring import ScoreJob
    from fleet.service.service import make_calendar, policy_windows
    from fleet.service.simulation import SetClock

    parts = policies.resolve(cfg.policy)
    repo = db.telemetry
    store = ReadOnlyStore(db.journal)
    cal = make_calendar(cfg, sim)
    now = time.time() if now_ts is None else now_ts
    last = store.last_decided_ts(cal.start_ts, NO_END_TS)
    hour_ts = cal.next_hour(last, now)
    if hour_ts > cal.last_hour_ts:
        raise ConfigError(f"database {shown_url(cfg.storage.url)!r}: the month is decided to its last hour; nothing to plan")
    clock = SetClock(max(now, hour_ts))  # the plan stands still at the hour it plans
    pool = PoolWatch(repo if cfg.pool is None else DeclaredPool(repo, cfg.pool), cfg.month.hours)
    windows = policy_windows(parts)
    scoring = ScoreJob(store, pool, cal, clock, windows, lambda _now: hour_ts, parts=parts, busy_floor=cfg.ingest.busy_floor)
    marker = list(windows.values())[-1]
    scored_by = "the service"
    if (store.last_scored_ts(marker, hour_ts, hour_ts + 1) or -1) < hour_ts:
        scoring.score_hours(hour_ts, 1)  # into memory, on the telemetry stored so far
        scored_by = "this plan, on the telemetry stored so far (the service scores the hour once it has settled)"
    demand = service_demand(repo, cfg.month.hours, sim)
    journal = KeptJournal()
    job = DecideJob(store, journal, pool, cal, clock, parts, lambda: hour_ts, scoring.kept, demand,
                    policy_scores=scoring.policy_scores)
    index = pool.current()
    job.decide_hour(hour_ts, index)
    m0, h = cal.month_of(hour_ts)
    before = float(demand.billed(m0, h - 1, 1)[1][0]) if h > 0 else None  # the hour before's, as measured so far
    _, entries, opened, closed, _retired = journal.written[0]
    planned = HourPlan(entries)
    run_set = sorted((store.run_set_at(hour_ts - HOUR_S) - set(closed)) | set(opened))
    return {
        "hour": _iso(hour_ts), "hour_ts": hour_ts, "month_hour": planned.size.record.hour, "scored_by": scored_by,
        "database": shown_url(cfg.storage.url), "run_set": run_set, "run_set_cards": len(run_set),
        **planned.as_json(),
        "entries": [{"key": e.key, "kind": e.kind, "card": e.card_key, "reason": e.reason} for e in entries],
        "demand_measured_before_tps": before if before is not None and math.isfinite(before) else None,
    }


def _render(p: dict) -> list[str]:
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
    store = open_store(cfg.storage.url)
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


# -- fleet serve --check ---------------------------------------------------------------------------------------------

def _bounded(fn: Callable[[], str], timeout_s: float) -> tuple[bool, str]:
    """(passed, what it found) of `fn` run for at most `timeout_s`: a store or server that does not answer fails."""
    got: list = []

    def run() -> None:
        try:
            got.append((True, fn()))
        except Exception as err:  # noqa: BLE001 - every failure of a check is its line
            got.append((False, " ".join(str(err).split()) or type(err).__name__))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    return got[0] if got else (False, f"no answer within {timeout_s:g} s")


def _store_check(url: str, wanted) -> str:
    from pathlib import Path

    from storage import open_store
    from storage.db import StoreError, head_revision
    from storage.existing import existing_revision, sqlite_file

    try:
        revision = existing_revision(url)
    except StoreError:
        path = sqlite_file(url)
        if path and not Path(path).exists() and Path(path).resolve().parent.is_dir():
            return f"{shown_url(url)}: no store yet; `fleet serve` creates it at schema {head_revision()}"
        raise
    if revision != head_revision():
        raise StoreError(f"{shown_url(url)} is at schema revision {revision}, this fleet needs {head_revision()}: "
                         f"run `fleet db upgrade --db {shown_url(url)}`")
    store = open_store(url)
    try:
        held = store.identity.read()
    finally:
        store.close()
    if held is not None and not held.matches(wanted):
        raise StoreError(f"{shown_url(url)} holds {held.describe()}; it cannot serve {wanted.describe()}")
    return f"{shown_url(url)}: a fleet store at schema {revision}, holding {held.describe() if held else 'nothing yet'} (read only)"


def check_service(cfg, config: str | None, simulate: str | None, seed: int | None) -> int:
    """`fleet serve --check`: one line a check; returns the exit status (0 every check passed, 1 one failed).
    A bad config is a `ConfigError` (status 2) before any check runs. Nothing is served or written."""
    from storage.identity import StoreIdentity

    source = f"config file {config!r}" if config else "the service config (defaults)"
    wanted = StoreIdentity.pool()
    if simulate is not None:
        from fleet.presets import load_preset

        scenario = load_preset(simulate).resolve(seed=seed)
        wanted = StoreIdentity.simulation(scenario.name, scenario.seed, scenario.hours)
        what = f"{source} with the simulated pool of {scenario.name}"
    else:
        cfg.require_pool(source)
        what = f"{source}: {times(len(cfg.pool.classes), 'card class', 'card classes')}, policy {cfg.policy.mode} mode"
    checks: list[tuple[str, bool, str]] = [("config", True, what)]
    checks.append(("store", *_bounded(lambda: _store_check(cfg.storage.url, wanted), CHECK_TIMEOUT_S)))
    if simulate is None:  # a simulation's telemetry is its own feed
        from fleet.ingest.sources import source_checks

        checks += source_checks(cfg.ingest.sources, CHECK_TIMEOUT_S)
    from fleet.service.actuators import ACTUATORS

    checks.append(("actuator", *ACTUATORS.get(cfg.actuator.kind).check(cfg.actuator)))
    for name, ok, line in checks:
        typer.echo(f"{'ok  ' if ok else 'FAIL'} {name}: {line}")
    failed = sum(not ok for _, ok, _ in checks)
    print(f"fleet serve --check: {times(len(checks), 'check')}, {failed} failed; nothing served or written", file=sys.stderr)
    return 1 if failed else 0


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
