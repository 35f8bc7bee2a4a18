"""`fleet serve`, `fleet explain CARD` and `fleet status`: the service and what it decided, from the store."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
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


def serve_cmd(
    config: Annotated[Optional[str], typer.Option("--config", help="Service config (TOML): pool, policy, schedule, storage, metrics, actuator.")] = None,
    db: DbOption = None,
    metrics_host: Annotated[Optional[str], typer.Option("--metrics-host", help="Address /metrics listens on (default 127.0.0.1).")] = None,
    metrics_port: Annotated[Optional[int], typer.Option("--metrics-port", help="Port of /metrics (default 9108; 0 picks a free one).")] = None,
    simulate: Annotated[Optional[str], typer.Option("--simulate", help="Play a preset's month (name or TOML path) as the pool's telemetry.")] = None,
    speed: Annotated[float, typer.Option("--speed", help="With --simulate: simulated seconds per wall second (3600: an hour a second).")] = 3600.0,
    seed: Annotated[Optional[int], typer.Option("--seed", help="With --simulate: draw the preset's month with this seed.")] = None,
    exit_when_done: Annotated[bool, typer.Option("--exit-when-done", help="With --simulate: stop once the month is billed.")] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="Logging level (info logs every dry-run action).")] = "warning",
    check: Annotated[bool, typer.Option("--check", help="Check the config, the store (read only) and the Prometheus URL, one line each, and exit: 0 all pass, 1 one fails, 2 a bad config.")] = False,
) -> None:
    """Run the autoscaler beside a pool (or a simulated one) until SIGTERM: score, size, evict, journal, act, bill, export metrics."""
    from fleet.cli.output import UsageError
    from fleet.core.scenario import ConfigError
    from fleet.presets import load_preset
    from fleet.service.metrics import FleetCollector, make_registry, serve_metrics
    from fleet.service.config import load_service_config
    from fleet.service.lease import make_keeper
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, Simulation, WallClock, simulation_config
    from storage.repository import open_repository
    from storage.service_store import ServiceStore

    if not speed > 0:
        raise UsageError(f"--speed {speed}: must be above 0")
    if simulate is None and (seed is not None or exit_when_done):
        raise UsageError("--seed and --exit-when-done go with --simulate")
    if metrics_port is not None and not 0 <= metrics_port <= 65535:
        raise UsageError(f"--metrics-port {metrics_port}: a port is a whole number from 0 to 65535 (0 picks a free one)")
    if log_level.lower() not in ("debug", "info", "warning", "error"):
        raise UsageError(f"--log-level {log_level!r}: expected debug, info, warning or error")
    logging.basicConfig(level=getattr(logging, log_level.upper()), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # Overlapping and missed runs are expected while a job catches up; they are counted in /metrics, not logged.
    # A job's failure is one line from the job runner (`job NAME failed: ...`), not APScheduler's traceback.
    logging.getLogger("apscheduler").setLevel(logging.CRITICAL)
    # Alembic's own lines (plugins set up, the migration context) say nothing of fleet's; a failed migration is an error.
    logging.getLogger("alembic").setLevel(max(logging.WARNING, getattr(logging, log_level.upper())))
    # Who leads the store is always said: taking, losing and releasing the lease, and whom a standby waits for.
    lease_log = logging.getLogger("fleet.service.lease")
    lease_log.setLevel(min(lease_log.getEffectiveLevel(), logging.INFO))
    metrics = {k: v for k, v in (("host", metrics_host), ("port", metrics_port)) if v is not None}
    cfg = load_service_config(config, {"storage": {"url": db} if db else {}, "metrics": metrics})
    if check:
        from fleet.cli.plan import check_service

        raise typer.Exit(check_service(cfg, config, simulate, seed))
    sim = None
    if simulate is not None:
        preset = load_preset(simulate)
        scenario = preset.resolve(seed=seed)
        cfg = simulation_config(cfg, scenario)
        sim = Simulation.of(scenario, cfg.month.start_ts, preset.path.parent if preset.path else None)
    else:
        cfg.require_pool(f"config file {config!r}" if config else "the service config")
    _refuse_busy_port(cfg.metrics.host, cfg.metrics.port)  # before the store is opened, or made
    repo = open_repository(cfg.storage.url)
    if sim is not None:
        last = ServiceStore(repo.engine).last_decided_ts(sim.start_ts, sim.end_ts)
        clock = SimClock(sim.start_ts if last is None else last + HOUR_S, speed)  # a restart resumes where the journal ends
    else:
        clock = WallClock()
    try:
        service = Service(cfg, repo, clock, simulation=sim, lease=make_keeper(cfg.lease, repo.engine))
    except KeyError as err:
        raise ConfigError(f"database {shown_url(cfg.storage.url)!r}: {err}") from None
    collector = FleetCollector(lambda: service.snapshot, lambda: service.stats, per_card=cfg.metrics.per_card,
                               quarantine_reasons=_reasons(), leadership=service.leadership,
                               now=lambda: service.clock.now(), retried=lambda: service.journal.acting.counts["retried"])
    service.metrics_job()  # the first scrape already sees the store's state
    try:
        server, _thread = serve_metrics(make_registry(collector), cfg.metrics.host, cfg.metrics.port)
    except OSError as err:  # taken since the check: a failure at run time, as a busy port is
        raise OSError(err.errno, f"metrics on {cfg.metrics.host}:{cfg.metrics.port}: {err.strerror or err}") from None
    host, port = server.server_address[:2]
    print(f"fleet serve: metrics on http://{host}:{port}/metrics; database {shown_url(cfg.storage.url)}", file=sys.stderr, flush=True)
    stop = threading.Event()
    got: list[int] = []  # the signal that stopped it: SIGINT (Ctrl-C) exits 130, SIGTERM (a clean stop asked for) 0

    def on_signal(signum, _frame) -> None:
        got.append(signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    if sim is not None and sys.stderr.isatty():
        _show_progress(service, sim)
    service.start()
    try:
        while not stop.wait(0.1):
            if exit_when_done and service.month_done():
                break
    finally:
        service.shutdown()
        service.metrics_job()
        server.shutdown()
    s = service.snapshot
    t = s.totals
    print(
        f"fleet serve: stopped; {s.hours_billed} hours of the month from {_iso(s.month_start_ts)} billed, bill ${t['bill_usd']:,.2f}, "
        f"{times(s.evictions, 'eviction')}, convergence {percent(t['convergence'])}", file=sys.stderr, flush=True,
    )
    if got and got[0] == signal.SIGINT:
        raise typer.Exit(130)  # `fleet: interrupted`, as every command says after Ctrl-C


def progress_line(billed_hours: int, month_hours: int) -> str:
    """The line a simulated month prints on a terminal as each of its days is billed."""
    days = -(-month_hours // 24)
    return f"fleet serve: day {-(-billed_hours // 24)} of {days} billed (hour {billed_hours} of {month_hours})"


def _show_progress(service, sim, every_s: float = 0.5) -> None:
    """On a daemon thread, a line on stderr each time a simulated day is billed (a demo month at the default speed
    runs for minutes and would otherwise say nothing between its first line and its last)."""
    hours = (sim.end_ts - sim.start_ts) // HOUR_S

    def run() -> None:
        shown_day = 0
        while shown_day * 24 < hours:
            threading.Event().wait(every_s)
            try:
                last = service.store.last_billed_ts(sim.start_ts)
            except Exception:  # the store is the service's to report on; a progress line never fails a run
                continue
            billed = 0 if last is None else (last - sim.start_ts) // HOUR_S + 1
            day = billed // 24 if billed < hours else -(-hours // 24)
            if day > shown_day:
                shown_day = day
                print(progress_line(billed, hours), file=sys.stderr, flush=True)

    threading.Thread(target=run, daemon=True, name="fleet-progress").start()


def _refuse_busy_port(host: str, port: int) -> None:
    """An `OSError` (exit status 1, a failure at run time) when /metrics cannot listen on host:port, found by binding
    it as the server will (address reuse on) and letting it go; port 0 picks a free one and cannot be busy."""
    import socket

    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return  # the server's own bind says what is wrong with the address
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            raise OSError(err.errno, f"metrics on {host}:{port}: {err.strerror or err}; nothing was started") from None


def _reasons() -> tuple[str, ...]:
    try:
        from fleet.ingest import REASONS
    except ImportError:
        return ()
    return REASONS


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
    app.command("serve")(serve_cmd)
    app.command("status")(status_cmd)
    app.command("explain")(explain_cmd)
    from fleet.cli import plan

    plan.register(app)
