"""`fleet serve`: the autoscaler beside a pool, its jobs around the core's hour-step, composed.

Five jobs, each its own part and each runnable by hand (the tests step them on
an injected clock; `fleet serve` runs them on APScheduler, `scheduler.py`):

- `ingest` (`telemetry.py`): telemetry into the store: a drop folder, a
  Prometheus server, or the simulated month's feed;
- `score` (`scoring.py`): every settled hour's windowed scores of every card;
- `decide` (`decide.py`): every scored hour through the core's `tick`, journaled
  with the state it leaves, then acted on;
- `billing` (`billing.py`): every decided hour that has ended, billed through
  the core's `bill_hours`;
- `metrics` (`snapshot.py`): the snapshot `/metrics` serves.

Each job catches up on every hour due when it runs and keeps its progress in the
store, so a missed or failed run loses nothing and a restart resumes where the
store says. Time is the calendar's (`calendar.py`) on an injected clock
(`simulation.py`); the pool is the store's, as a frozen index (`pool.py`).
"""

from __future__ import annotations

import threading
from typing import Callable, Mapping

from fleet.service.billing import BillJob, Hindsight, SimulatedTruth
from fleet.service.calendar import HOUR_S, Calendar
from fleet.service.config import ServiceConfig
from fleet.service.decide import DecideJob
from fleet.service.demand import MonthDemand
from fleet.service.journal import Actuator, Command, DryRun, Journal, Webhook
from fleet.service.pool import PoolWatch, declare_pool
from fleet.service.scheduler import JOBS, JobRunner, Scheduler, intervals
from fleet.service.scoring import ScoreJob
from fleet.service.simulation import Clock, Simulation
from fleet.service.snapshot import Snapshot, build_snapshot
from fleet.service.telemetry import IngestJob
from storage.repository import SqlRepository
from storage.service_store import ServiceStore
from storage.values import ClassSpec


def make_actuator(cfg: ServiceConfig) -> Actuator:
    a = cfg.actuator
    if a.kind == "command":
        return Command(a.command, a.timeout_s)
    if a.kind == "webhook":
        return Webhook(a.url or "", a.timeout_s, a.auth)
    return DryRun()


def make_calendar(cfg: ServiceConfig, sim: Simulation | None = None) -> Calendar:
    if sim is None:
        return Calendar(cfg.month.start_ts, cfg.month.hours, cfg.schedule.settle_s)
    return Calendar(cfg.month.start_ts, cfg.month.hours, cfg.schedule.settle_s, sim.start_ts, sim.end_ts, sim.first_ts)


def policy_windows(parts) -> dict[str, int]:
    """The windows the policy reads (name -> hours): sizing first, eviction last."""
    p = parts.policy
    return {p.window: parts.size_window_hours, p.eviction_window: parts.evict_window_hours}


class Service:
    """The autoscaler beside a pool: its jobs over the store, wired to one clock, calendar and pool.

    `score_windows` (name -> hours) chooses the windows scored each hour; it must
    hold the policy's own, and the last one's scores mark an hour scored. By
    default it is the policy's: sizing, then eviction.
    """

    def __init__(
        self,
        cfg: ServiceConfig,
        repo: SqlRepository,
        clock: Clock,
        actuator: Actuator | None = None,
        simulation: Simulation | None = None,
        score_windows: Mapping[str, int] | None = None,
    ):
        if cfg.policy is None or cfg.pool is None:
            raise ValueError("the service needs a pool and a policy")
        import policies

        self.cfg = cfg
        self.policy = cfg.policy
        self.parts = policies.resolve(cfg.policy)
        windows = dict(score_windows) if score_windows is not None else policy_windows(self.parts)
        for name, hours in policy_windows(self.parts).items():
            if windows.get(name) != hours:
                raise ValueError(f"the scored windows must hold the policy's {name!r} window ({hours} hours)")
        self.repo = repo
        self.store = ServiceStore(repo.engine)
        self.clock = clock
        self.sim = simulation
        self.calendar = make_calendar(cfg, simulation)
        self.journal = Journal(self.store, actuator or make_actuator(cfg), clock.now)
        self.runner = JobRunner(clock.now)
        self.snapshot: Snapshot | None = None
        self._scheduler: Scheduler | None = None
        self._stop = threading.Event()

        cards = {c.card_id: c.card_class for c in cfg.pool.cards}
        if simulation is not None:
            cards.update(simulation.cards())
        declare_pool(repo, [ClassSpec(c.name, c.rated_tps, c.rent_usd_per_month) for c in cfg.pool.classes], cards, clock.now())
        self.pool = PoolWatch(repo, self.store, cfg.month.hours)
        demand = MonthDemand(cfg.demand, cfg.month.hours, simulation.month.demand_tps if simulation is not None else None)
        stopping = self._stop.is_set
        self.ingest = IngestJob(cfg, repo, self.store, clock, simulation)
        self.scoring = ScoreJob(self.store, self.pool, self.calendar, clock, windows,
                                lambda now: self.calendar.watermark_ts(now, self.ingest.fed_through_ts), stopping, self.parts)
        self.decide = DecideJob(self.store, self.journal, self.pool, self.calendar, clock, self.parts,
                                self.scoring.scored_through_ts, self.scoring.kept, demand, stopping,
                                policy_scores=self.scoring.policy_scores)
        truth = SimulatedTruth(simulation, self.calendar) if simulation is not None else Hindsight(repo, self.calendar)
        self.billing = BillJob(self.store, self.pool, self.calendar, clock, demand, truth, stopping)

    # -- the jobs, by hand or by the scheduler ------------------------------------------------
    def ingest_job(self) -> int:
        return self.ingest.run()

    def score_job(self) -> int:
        return self.scoring.run()

    def decide_job(self) -> int:
        return self.decide.run()

    def billing_job(self) -> int:
        return self.billing.run()

    def metrics_job(self) -> Snapshot:
        self.snapshot = build_snapshot(self.store, self.pool.current(), self.calendar, self.policy, self.scoring.windows,
                                       self.cfg.checks, self.clock.now())
        return self.snapshot

    def jobs(self) -> dict[str, Callable[[], object]]:
        return {"ingest": self.ingest_job, "score": self.score_job, "decide": self.decide_job,
                "billing": self.billing_job, "metrics": self.metrics_job}

    @property
    def stats(self):
        return self.runner.stats

    def month_done(self) -> bool:
        """The simulated month is billed to its last hour."""
        if self.sim is None:
            return False
        return self.store.last_billed_ts(self.sim.start_ts) == self.sim.end_ts - HOUR_S

    # -- running -------------------------------------------------------------------------------
    def intervals(self) -> dict[str, float]:
        return intervals(self.cfg.schedule, self.clock, self.sim is not None)

    def start(self, scheduler=None) -> None:
        """Start the jobs on a BackgroundScheduler (or the one given)."""
        jobs = self.jobs()
        self._scheduler = Scheduler(self.runner, {name: jobs[name] for name in JOBS}, self.intervals(),
                                    self.cfg.schedule.misfire_grace_s)
        self._scheduler.start(scheduler)

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def shutdown(self) -> None:
        self.stop()
        if self._scheduler is not None:
            self._scheduler.shutdown()
