"""`fleet serve`: the autoscaler beside a pool, its jobs around the core's hour-step, composed.

Seven jobs (eight with `[policy.reactive]`), each its own part and each runnable by hand (the tests step them on
an injected clock; `fleet serve` runs them on APScheduler, `scheduler.py`):

- `ingest` (`telemetry.py`): telemetry into the store: a drop folder, a
  Prometheus server, or the simulated month's feed;
- `score` (`scoring.py`): every settled hour's windowed scores of every card;
- `decide` (`decide.py`): every scored hour through the core's `tick`, journaled
  with the state it leaves;
- `act` (`acting.py`): what is journaled and not acted, carried out in journal
  order per card, failures retried or set aside, never holding up the deciding;
- `billing` (`billing.py`): every decided hour that has ended, billed through
  the core's `bill_hours`;
- `prune`: raw samples of rolled-up hours older than `[storage] prune_raw_after_days` go;
- `metrics` (`snapshot.py`): the snapshot `/metrics` serves;
- `reactive` (`reactive.py`, with `[policy.reactive]`): within the hour, cards
  added when the measured queue or demand says the plan is short.

Only the leader of the store runs the writing jobs (every job but `metrics`):
with a lease keeper (`lease.py`, as `fleet serve` gives) the service leads while
it holds the store's lease and stands by otherwise, and every action carries the
lease's epoch. Without one the caller vouches that nothing else writes the store
(the tests that step the jobs by hand). The store records what it holds at the
first serve (`storage.identity`); a service of anything else is refused before it
writes.

Each job catches up on every hour due when it runs and keeps its progress in the
store, so a missed or failed run loses nothing and a restart resumes where the
store says. Time is the calendar's (`calendar.py`) on an injected clock
(`simulation.py`); the pool is the store's, as a frozen index (`pool.py`).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable, Mapping

from fleet.core.units import NO_END_TS
from fleet.core.errors import ConfigError
from fleet.core.retry import RetryRules
from fleet.service.billing import BillJob, Hindsight, SimulatedTruth
from fleet.service.calendar import HOUR_S
from fleet.service.config import ServiceConfig
from fleet.service.actuators import Actuator
from fleet.service.frame import Lead
from fleet.service.journal import Journal
from fleet.ingest.pool import declare_pool
from fleet.service.pipeline import decide_pipeline, make_frame, policy_windows
from fleet.service.reactive import PrometheusQueue, ReactiveJob
from fleet.service.scheduler import JOBS, OPTIONAL, READERS, JobRunner, Scheduler, intervals, prune_every_s
from fleet.service.simulation import Clock, Simulation
from fleet.service.snapshot import Snapshot, build_snapshot
from fleet.service.telemetry import IngestJob
from storage.identity import StoreIdentity
from storage.open import as_store

if TYPE_CHECKING:
    from fleet.service.lease import LeaseKeeper
    from storage.interfaces import Store, TelemetryStore

log = logging.getLogger("fleet.service")
DAY_S = 86_400


def make_actuator(cfg: ServiceConfig) -> Actuator:
    from fleet.service.actuators import make_actuator as from_settings

    return from_settings(cfg.actuator.kind, cfg.actuator.own)


def store_identity(sim: Simulation | None) -> StoreIdentity:
    """What a service of `sim` (or of a real pool, None) puts in its store."""
    if sim is None:
        return StoreIdentity.pool()
    return StoreIdentity.simulation(sim.scenario.name, sim.scenario.seed, sim.scenario.hours)


def check_identity(store: Store, wanted: StoreIdentity) -> StoreIdentity:
    """Record `wanted` as what the store holds, or refuse (ConfigError, nothing written) a store holding another."""

    def refuse(held: StoreIdentity) -> ConfigError:
        return ConfigError(f"database {store.shown_url!r} holds {held.describe()}; it cannot serve {wanted.describe()} "
                           "(give another --db)")

    held = store.identity.read()
    if held is not None and not held.matches(wanted):
        raise refuse(held)
    held = store.identity.claim(wanted)  # the first claim wins, should another serve claim at the same time
    if not held.matches(wanted):
        raise refuse(held)
    return held


class Service:
    """The autoscaler beside a pool: its jobs over the store, wired to one clock, calendar and pool.

    `store` is the store the service keeps (`storage.open_store`; the telemetry
    store of one database is taken too, its other roles opened over the same
    database): `self.store` in every role, `self.journal_store` its journal and
    `self.telemetry` its telemetry. `score_windows` (name -> hours) chooses the windows scored each
    hour; it must hold the policy's own, and the last one's scores mark an hour
    scored. By default it is the policy's: sizing, then eviction. `lease` (a
    `LeaseKeeper`) makes the service lead only while it holds the store's lease.
    """

    def __init__(
        self,
        cfg: ServiceConfig,
        store: Store | TelemetryStore,
        clock: Clock,
        actuator: Actuator | None = None,
        simulation: Simulation | None = None,
        score_windows: Mapping[str, int] | None = None,
        lease: LeaseKeeper | None = None,
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
        self.store = as_store(store)
        self.identity = check_identity(self.store, store_identity(simulation))  # before anything is written
        self.telemetry = telemetry = self.store.telemetry
        self.journal_store = self.store.journal
        self.clock = clock
        self.sim = simulation
        a = cfg.actuator
        self.journal = Journal(self.journal_store, actuator or make_actuator(cfg), clock.now,
                               RetryRules(max_retry_s=a.max_retry_s, expire_after_s=a.expire_after_s),
                               wall_seconds=clock.wall_seconds, simulated=simulation is not None)
        self.job_names = tuple(n for n in JOBS if n not in OPTIONAL or (n == "reactive" and cfg.policy.reactive is not None))
        self.runner = JobRunner(clock.now, self.job_names)
        self.snapshot: Snapshot | None = None
        self._scheduler: Scheduler | None = None
        self._stop = threading.Event()
        self.lease = lease
        if lease is not None:
            lease.on_lead = self._on_lead
        self.runner.may_run = lambda name: self.leading()

        cards = {c.card_id: c.card_class for c in cfg.pool.cards}
        if simulation is not None:
            cards.update(simulation.cards())
        declare_pool(telemetry, cfg.pool.classes, cards, clock.now())
        if simulation is None and self.parts.knows_demand:
            raise ConfigError("a real pool's demand is measured, not known ahead: set policy.forecast to a forecaster "
                              "(e.g. \"seasonal\")")
        self.frame = frame = make_frame(cfg, self.parts, self.store, telemetry, clock, simulation)
        self.calendar, self.pool = frame.calendar, frame.pool
        lead = Lead(self.stopping, self.epoch)
        self.ingest = IngestJob(cfg, telemetry, self.journal_store, clock, simulation)
        pipeline = decide_pipeline(cfg, frame, self.store, self.journal, windows,
                                   lambda now: self.calendar.watermark_ts(now, self.ingest.fed_through_ts), lead)
        self.scoring, self.reconciler, self.decide = pipeline.scoring, pipeline.reconciler, pipeline.decide
        source = cfg.reactive_source() if simulation is None else None
        queue = None if source is None else PrometheusQueue(source[0], cfg.reactive.backlog_query, cfg.reactive.demand_query,
                                                            source[1])
        self.reactive = ReactiveJob(frame, self.journal_store, self.journal, self.decide.loop_scores, lead, queue,
                                    cfg.schedule.reactive_interval_s)
        truth = SimulatedTruth(simulation, self.calendar) if simulation is not None else Hindsight(telemetry, self.calendar)
        self.billing = BillJob(self.journal_store, self.pool, self.calendar, clock, frame.demand, truth, self.stopping,
                               terms=cfg)  # cfg: its promise, which the month is judged by

    # -- leading -------------------------------------------------------------------------------
    def leading(self) -> bool:
        """Whether this service may write the store now: it holds the lease within its renew deadline (or has
        no lease keeper)."""
        return self.lease is None or self.lease.leading()

    def epoch(self) -> int | None:
        """The epoch of the lease this service leads under (None without a lease keeper)."""
        return None if self.lease is None else self.lease.elector.epoch

    def leadership(self) -> tuple[bool, int | None]:
        """(leads now, the epoch of the lease as last seen: its own when it leads, the holder's when it stands by)."""
        if self.lease is None:
            return True, None
        seen = self.lease.elector.observed
        leads = self.leading()
        return leads, (self.lease.elector.epoch if leads else seen.epoch if seen is not None else None)

    def lease_lost(self) -> str | None:
        """Why this service lost the lease through the store's failure and has not taken it back, or None."""
        return None if self.lease is None else self.lease.lost_reason

    def renew_lease(self) -> bool:
        """One attempt to take or renew the lease now (the keeper's thread does this every renew_every_s)."""
        return True if self.lease is None else self.lease.tick()

    def _on_lead(self, epoch: int) -> None:
        """Just became leader: pick up where the store is (another leader may have moved it on), then run the
        writing jobs at once rather than at their next interval."""
        if self.sim is not None:
            last = self.journal_store.last_decided_ts(self.sim.start_ts, self.sim.end_ts)
            if last is not None and hasattr(self.clock, "advance_to"):
                self.clock.advance_to(last + HOUR_S)  # a simulation resumes where the journal ends, as a restart does
            rolled = self.telemetry.last_rollup_ts()
            if rolled is not None and (self.ingest.fed_through_ts is None or rolled > self.ingest.fed_through_ts):
                self.ingest.fed_through_ts = rolled
        if self._scheduler is not None:
            self._scheduler.wake([n for n in self.job_names if n not in READERS])

    # -- the jobs, by hand or by the scheduler ------------------------------------------------
    def ingest_job(self) -> int:
        return self.ingest.run() if self.leading() else 0

    def score_job(self) -> int:
        return self.scoring.run()

    def decide_job(self) -> int:
        return self.decide.run()

    def act_job(self) -> int:
        """One acting pass (`acting.py`) while this service leads; returns the actions done."""
        if self.stopping():
            return 0
        return self.journal.act_pending(self.stopping, epoch=self.epoch()).acted

    def reactive_job(self) -> int:
        """One run of the reactive loop (`reactive.py`) while this service leads; returns the cards added."""
        return self.reactive.run()

    def billing_job(self) -> int:
        return self.billing.run()

    def prune_job(self) -> int:
        """Raw samples of rolled-up hours older than `prune_raw_after_days` go; returns the samples deleted."""
        days = self.cfg.storage.prune_raw_after_days
        if not days > 0 or not self.leading():
            return 0
        return self.telemetry.prune_raw(int(self.clock.now() - days * DAY_S)).samples

    def metrics_job(self) -> Snapshot:
        self.snapshot = build_snapshot(self.journal_store, self.telemetry, self.pool.current(), self.calendar, self.policy,
                                       self.scoring.windows, self.cfg.checks, self.clock.now(), self.sim is None,
                                       promised=self.cfg.slo is not None)
        self.snapshot.curves = self.scoring.card_curves
        return self.snapshot

    def jobs(self) -> dict[str, Callable[[], object]]:
        return {"ingest": self.ingest_job, "score": self.score_job, "decide": self.decide_job, "act": self.act_job,
                "billing": self.billing_job, "prune": self.prune_job, "metrics": self.metrics_job,
                "reactive": self.reactive_job}

    @property
    def stats(self):
        return self.runner.stats

    def month_done(self) -> bool:
        """The simulated month is billed to its last hour, and every action is done, set aside or expired."""
        if self.sim is None:
            return False
        return (self.journal_store.last_billed_ts(self.sim.start_ts) == self.sim.end_ts - HOUR_S
                and self.journal_store.oldest_unacted_ts() is None)

    # -- running -------------------------------------------------------------------------------
    def intervals(self) -> dict[str, float]:
        simulated = self.sim is not None
        every = {**intervals(self.cfg.schedule, self.clock, simulated), "prune": prune_every_s(self.clock, simulated)}
        return {name: every[name] for name in self.job_names}

    def start(self, scheduler=None) -> None:
        """Take the lease (or stand by), then start the jobs on a BackgroundScheduler (or the one given)."""
        line = self.catch_up_line() if self.sim is None else None
        if line:
            log.warning("%s", line)
        jobs = self.jobs()
        self._scheduler = Scheduler(self.runner, {name: jobs[name] for name in self.job_names}, self.intervals(),
                                    self.cfg.schedule.misfire_grace_s)
        self.journal.wake = lambda: self._scheduler.wake(["act"])  # deciding hands acting to the act job
        if self.lease is not None:
            self.lease.start()
        self._scheduler.start(scheduler)

    def catch_up_line(self) -> str | None:
        """What start-up says of a real pool's store that is behind the clock by more than acting allows, or None."""
        now = self.clock.now()
        behind, late = self.calendar.catch_up(self.journal_store.last_decided_ts(0, NO_END_TS), now, self.cfg.actuator.expire_after_s)
        if not late:
            return None
        return (f"{behind} hours ended and not decided: they are decided in turn, and the actions of the {late} that "
                f"ended more than [actuator] expire_after_s ({self.cfg.actuator.expire_after_s:g} s) ago are journaled "
                "as expired, not carried out")

    def stop(self) -> None:
        self._stop.set()

    def stopping(self) -> bool:
        """The jobs stop at their next step: the service is stopping, or it no longer leads."""
        return self._stop.is_set() or not self.leading()

    def shutdown(self) -> None:
        """Stop the jobs, kill what the actuator still runs, wait for the jobs to end, and only then give the lease
        up: a standby must not take over while an action of this leader can still complete. The actuator is closed
        first, so a hanging action does not hold the stop up: its group is killed and its decision stays unacted."""
        self.stop()
        self.journal.actuator.close()
        if self._scheduler is not None:
            self._scheduler.shutdown()
        if self.lease is not None:
            self.lease.stop(release=True)
