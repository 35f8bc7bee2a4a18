"""The jobs on APScheduler 3: intervals, the run wrapper, the listener that counts misses and errors, start and stop.

Jobs run on a BackgroundScheduler with `coalesce=True` (a stalled job runs once,
not once per missed interval), `max_instances=1` (a job never overlaps itself)
and a misfire grace of half its interval (a run later than that is skipped and
counted; the next one catches up, as every job catches up on all the hours due).
Writers take turns on one lock, and run only while the runner's `may_run` says
so (the service leads the store); a writer's run on a standby is skipped and not
counted. Only `start` and `wake` touch APScheduler, so the stats, the intervals
and the run wrapper are plain code.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from fleet.service.calendar import HOUR_S

JOBS = ("ingest", "score", "decide", "act", "billing", "prune", "metrics", "reactive")
OPTIONAL = ("reactive",)
"""Jobs a service runs only when its config turns them on (`[policy.reactive]`)."""
READERS = ("metrics",)
"""Jobs that only read the store, and so run without the write lock."""
UNLOCKED = ("act",)
"""Writers that run without the write lock: an action may take its whole time-out, and the other writers must not
wait for it (its writes are one small transaction each, which wait their turn under the busy timeout)."""

PRUNE_EVERY_S = float(HOUR_S)
"""Raw samples are pruned about hourly (of the service's clock): each prune deletes about an hour's worth."""

log = logging.getLogger("fleet.service.scheduler")


@dataclass
class JobStats:
    runs: int = 0
    errors: int = 0
    misses: int = 0
    skipped_overlap: int = 0
    duration_s_sum: float = 0.0
    last_success_ts: float | None = None
    last_error: str | None = None


def intervals(schedule, clock, simulated: bool) -> dict[str, float]:
    """Wall seconds between runs of each job. A simulation runs each once per simulated hour (metrics every
    simulated quarter hour), never more often than every 50 ms (metrics: 500 ms) nor less often than the wall schedule."""
    s = schedule
    wall = {"ingest": s.ingest_every_s, "score": s.tick_every_s, "decide": s.tick_every_s, "act": s.tick_every_s,
            "billing": s.billing_every_s, "metrics": s.metrics_every_s, "reactive": s.reactive_interval_s}
    if not simulated:
        return wall
    per_clock = {"ingest": HOUR_S, "score": HOUR_S, "decide": HOUR_S, "act": HOUR_S, "billing": HOUR_S, "metrics": HOUR_S / 4,
                 "reactive": s.reactive_interval_s}
    floor = {"metrics": 0.5}
    return {k: min(wall[k], max(floor.get(k, 0.05), clock.wall_seconds(v))) for k, v in per_clock.items()}


def prune_every_s(clock, simulated: bool) -> float:
    """Wall seconds between prunes: hourly, of a simulation's clock too (never more often than every 50 ms)."""
    return max(0.05, min(PRUNE_EVERY_S, clock.wall_seconds(PRUNE_EVERY_S))) if simulated else PRUNE_EVERY_S


class JobRunner:
    """Runs a job by name, counting its runs and time; writers take turns on one lock, and run only if
    `may_run(name)` (a standby skips them, uncounted)."""

    def __init__(self, now: Callable[[], float], names=JOBS, may_run: Callable[[str], bool] = lambda name: True):
        self.now = now
        self.stats = {name: JobStats() for name in names}
        self.may_run = may_run
        self._write_lock = threading.Lock()
        self._skipped: set[str] = set()  # writers whose last run was skipped: their "ok" event is not a success

    def run(self, name: str, fn: Callable[[], object]) -> object:
        if name not in READERS and not self.may_run(name):
            self._skipped.add(name)
            return None
        self._skipped.discard(name)
        t0 = time.perf_counter()
        try:
            if name in READERS or name in UNLOCKED:
                return fn()
            # Writers take turns in this process: waiting on a lock wakes at once, where SQLite's busy handler sleeps.
            with self._write_lock:
                return fn()
        finally:
            st = self.stats[name]
            st.runs += 1
            st.duration_s_sum += time.perf_counter() - t0

    def record(self, name: str, outcome: str, error: BaseException | None = None) -> None:
        """Count one scheduler outcome of a job: `ok`, `error`, `missed` or `skipped-overlap`."""
        st = self.stats.get(name)
        if st is None or name in self._skipped:
            return
        if outcome == "ok":
            st.last_success_ts = self.now()
        elif outcome == "error":
            st.errors += 1
            st.last_error = repr(error)
            log.error("job %s failed: %r", name, error)
        elif outcome == "missed":
            st.misses += 1
        elif outcome == "skipped-overlap":
            st.skipped_overlap += 1


class Scheduler:
    """The jobs on a BackgroundScheduler, each at its interval, all first run at once."""

    def __init__(self, runner: JobRunner, jobs: Mapping[str, Callable[[], object]], every_s: Mapping[str, float],
                 misfire_grace_s: float | None = None):
        self.runner = runner
        self.jobs = dict(jobs)
        self.every_s = dict(every_s)
        self.misfire_grace_s = misfire_grace_s
        self.scheduler = None

    def start(self, scheduler=None) -> None:
        """Start the jobs on a BackgroundScheduler (or the one given)."""
        from datetime import datetime, timezone

        from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler

        outcomes = {EVENT_JOB_EXECUTED: "ok", EVENT_JOB_ERROR: "error", EVENT_JOB_MISSED: "missed",
                    EVENT_JOB_MAX_INSTANCES: "skipped-overlap"}

        def on_event(event) -> None:
            if event.code in outcomes:
                self.runner.record(event.job_id, outcomes[event.code], getattr(event, "exception", None))

        self.scheduler = scheduler or BackgroundScheduler(timezone=timezone.utc,
                                                          executors={"default": ThreadPoolExecutor(len(self.jobs))})
        self.scheduler.add_listener(on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
        first = datetime.now(timezone.utc)
        for name, every in self.every_s.items():
            grace = self.misfire_grace_s or every / 2
            self.scheduler.add_job(
                self.runner.run, "interval", args=(name, self.jobs[name]), id=name, name=name, seconds=every,
                coalesce=True, max_instances=1, misfire_grace_time=max(1, int(round(grace))), next_run_time=first,
            )
        self.scheduler.start()

    def wake(self, names) -> None:
        """Run these jobs now rather than at their next interval (a standby that has just become leader)."""
        from datetime import datetime, timezone

        if self.scheduler is None or not self.scheduler.running:
            return
        for name in names:
            if name in self.jobs:
                try:
                    self.scheduler.modify_job(name, next_run_time=datetime.now(timezone.utc))
                except LookupError:  # the scheduler is shutting down and has dropped it
                    pass

    def shutdown(self) -> None:
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=True)
