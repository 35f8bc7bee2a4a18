"""`fleet serve`: the service beside a pool, or a simulated month on a faster clock."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Annotated, Optional

import typer

from fleet.cli.words import DbOption, iso_minute, percent, shown_url, times
from fleet.core.units import HOUR_S


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
    from fleet.service.config import load_service_config

    _refuse_bad_flags(speed, simulate, seed, exit_when_done, metrics_port, log_level)
    _set_up_logging(log_level)
    metrics = {k: v for k, v in (("host", metrics_host), ("port", metrics_port)) if v is not None}
    cfg = load_service_config(config, {"storage": {"url": db} if db else {}, "metrics": metrics})
    if check:
        from fleet.cli.serve_check import check_service

        raise typer.Exit(check_service(cfg, config, simulate, seed))
    cfg, sim = _month_of(cfg, config, simulate, seed)
    _refuse_busy_port(cfg.metrics.host, cfg.metrics.port)  # before the store is opened, or made
    service = _open_service(cfg, sim, speed)
    try:
        got = _serve(service, cfg, sim, exit_when_done)
    finally:
        service.store.close()
    lost = service.lease_lost() if exit_when_done else None
    if lost is not None:  # it would stand by for ever, its month never done: the one line, exit status 1
        print(f"fleet: error: --exit-when-done: {lost}; the month is not billed to its end", file=sys.stderr, flush=True)
        raise typer.Exit(1)
    s = service.snapshot
    t = s.totals
    goodput = t.get("goodput_share")  # under a promise: the share of delivered tokens served within it
    within = "" if goodput is None or goodput != goodput else f", {percent(goodput)} of delivered tokens within the promise"
    print(
        f"fleet serve: stopped; {s.hours_billed} hours of the month from {iso_minute(s.month_start_ts)} billed, bill ${t['bill_usd']:,.2f}, "
        f"{times(s.evictions, 'eviction')}, convergence {percent(t['convergence'])}{within}", file=sys.stderr, flush=True,
    )
    if got and got[0] == signal.SIGINT:
        raise typer.Exit(130)  # `fleet: interrupted`, as every command says after Ctrl-C


def _refuse_bad_flags(speed: float, simulate: str | None, seed: int | None, exit_when_done: bool,
                      metrics_port: int | None, log_level: str) -> None:
    """A flag that cannot be served as given is a usage error (exit status 2), before anything is read or opened."""
    from fleet.cli.output import UsageError

    if not speed > 0:
        raise UsageError(f"--speed {speed}: must be above 0")
    if simulate is None and (seed is not None or exit_when_done):
        raise UsageError("--seed and --exit-when-done go with --simulate")
    if metrics_port is not None and not 0 <= metrics_port <= 65535:
        raise UsageError(f"--metrics-port {metrics_port}: a port is a whole number from 0 to 65535 (0 picks a free one)")
    if log_level.lower() not in ("debug", "info", "warning", "error"):
        raise UsageError(f"--log-level {log_level!r}: expected debug, info, warning or error")


def _set_up_logging(log_level: str) -> None:
    logging.basicConfig(level=getattr(logging, log_level.upper()), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # Overlapping and missed runs are expected while a job catches up; they are counted in /metrics, not logged.
    # A job's failure is one line from the job runner (`job NAME failed: ...`), not APScheduler's traceback.
    logging.getLogger("apscheduler").setLevel(logging.CRITICAL)
    # Alembic's own lines (plugins set up, the migration context) say nothing of fleet's; a failed migration is an error.
    logging.getLogger("alembic").setLevel(max(logging.WARNING, getattr(logging, log_level.upper())))
    # Who leads the store is always said: taking, losing and releasing the lease, and whom a standby waits for.
    lease_log = logging.getLogger("fleet.service.lease")
    lease_log.setLevel(min(lease_log.getEffectiveLevel(), logging.INFO))


def _month_of(cfg, config: str | None, simulate: str | None, seed: int | None):
    """(the config to serve, the simulated month or None): a preset's month played as the pool's telemetry, or the
    real pool the config must then declare."""
    from fleet.presets import load_preset
    from fleet.service.simulation import Simulation, simulation_config

    if simulate is None:
        cfg.require_pool(f"config file {config!r}" if config else "the service config")
        return cfg, None
    from fleet.core.scenario import ConfigError
    from fleet.service.config import hourly_only

    preset = load_preset(simulate)
    scenario = preset.resolve(seed=seed)
    try:
        hourly_only(scenario.policy, scenario.demand, scenario.step_minutes, simulated=True)
    except ValueError as err:
        raise ConfigError(f"--simulate {simulate!r}: {err}") from None
    cfg = simulation_config(cfg, scenario)
    return cfg, Simulation.of(scenario, cfg.month.start_ts, preset.path.parent if preset.path else None)


def _open_service(cfg, sim, speed: float):
    """The service on its store (made if new), on a simulated clock that resumes where the journal ends or on the wall
    clock, with the keeper of the store's lease."""
    from fleet.core.scenario import ConfigError
    from fleet.service.lease import make_keeper
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, WallClock
    from storage.open import open_store

    store = open_store(cfg.storage.url, create=True)
    try:
        if sim is not None:
            last = store.journal.last_decided_ts(sim.start_ts, sim.end_ts)
            clock = SimClock(sim.start_ts if last is None else last + HOUR_S, speed)  # a restart resumes where the journal ends
        else:
            clock = WallClock()
        try:
            return Service(cfg, store, clock, simulation=sim, lease=make_keeper(cfg.lease, store.leases))
        except KeyError as err:
            raise ConfigError(f"database {shown_url(cfg.storage.url)!r}: {err}") from None
    except BaseException:
        store.close()
        raise


def _serve(service, cfg, sim, exit_when_done: bool) -> list[int]:
    """/metrics up, the jobs run until a signal (or, with `exit_when_done`, the month is billed or the lease lost to a
    store that refuses its renewal), then everything
    stopped in order; returns the signal that stopped it, if one did."""
    server = _serve_metrics(service, cfg)
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
            if exit_when_done and (service.month_done() or service.lease_lost() is not None):
                break
    finally:
        service.shutdown()
        service.metrics_job()
        server.shutdown()
    return got


def _serve_metrics(service, cfg):
    """/metrics on its host and port, already showing the store's state; the line that says where goes to stderr."""
    from fleet.service.metrics import FleetCollector, make_registry, serve_metrics

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
    return server


def days_billed(billed_hours: int, month_hours: int) -> int:
    """Whole days of a simulated month billed: every day once the month is billed to its end (a last short day
    counts), else the hours billed in whole days. The progress line says this number and is printed when it grows,
    so each day is said once (a line counting a started day as billed said "day 2" twice and skipped "day 3")."""
    return -(-month_hours // 24) if billed_hours >= month_hours else billed_hours // 24


def progress_line(billed_hours: int, month_hours: int) -> str:
    """The line a simulated month prints on a terminal as each of its days is billed."""
    days = -(-month_hours // 24)
    return f"fleet serve: day {days_billed(billed_hours, month_hours)} of {days} billed (hour {billed_hours} of {month_hours})"


def _show_progress(service, sim, every_s: float = 0.5) -> None:
    """On a daemon thread, a line on stderr each time a simulated day is billed (a demo month at the default speed
    runs for minutes and would otherwise say nothing between its first line and its last)."""
    hours = (sim.end_ts - sim.start_ts) // HOUR_S

    def run() -> None:
        shown_day = 0
        while shown_day * 24 < hours:
            threading.Event().wait(every_s)
            try:
                last = service.journal_store.last_billed_ts(sim.start_ts)
            except Exception:  # the store is the service's to report on; a progress line never fails a run
                continue
            billed = 0 if last is None else (last - sim.start_ts) // HOUR_S + 1
            day = days_billed(billed, hours)
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


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
    from fleet.cli import plan, status

    status.register(app)
    plan.register(app)
