"""Acting on the journal: each pass carries out what is due, and no action holds up another card's or the deciding.

An action's try ends `done` (marked acted), `transient` (tried again after a
backoff, within `[actuator] max_retry_s` of its first try) or `permanent` (set
aside once its tries are spent). Backoff and the retry budget run on the
service's clock; lateness is judged in wall seconds (the same on a real pool's
clock; in a simulation the actuator still runs on the wall, so a fast clock does
not expire what it simply could not reach yet). A set-aside action gets an `act-failed` record
in the journal (reason; tries and last error in its `SetAsideRecord`), and a decision whose hour ended more
than `[actuator] expire_after_s` ago gets an `act-expired` record instead of
being acted late; either record closes the decision, which stays unacted
(`acted_ts` empty) because it never happened. Actions run in journal order per
card: a card whose earlier action is waiting for its retry has its later ones
wait too, while every other card's go ahead. The retry schedule is the pure
`fleet.core.retry`, on the injected clock and random draw, so tests step it.
What a pass does is counted in `counts` (for `fleet_actions_total{outcome}`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from fleet.core.retry import PERMANENT, TRANSIENT, Failure, NextStep, RetryRules, Tries, after_failure, expired
from storage.records import SetAsideRecord
from storage.values import ACTION_KINDS, JournalEntry, JournalRow, Kind

ACTIONS = ACTION_KINDS
"""Journal kinds an actuator carries out; other kinds (`size`, `eviction-pass`) are records."""

ACT_BATCH_SIZE = 100
"""Actions marked acted in one transaction: the most a crash between acting and marking offers again."""

FULL_READ_EVERY = 64
"""Acting passes between reads of the whole journal's open decisions (the others start where the last one left off)."""

ACT_OUTCOMES = ("done", "retried", "set-aside", "expired")
"""The labels of `fleet_actions_total{outcome}`, known up front so the series exist from the first scrape."""

log = logging.getLogger("fleet.service.journal")


class ActuatorError(RuntimeError):
    """An action that did not go through: `transient` (tried again after a backoff) or `permanent` (set aside once
    `max_tries` tries have failed)."""

    def __init__(self, message: str, outcome: Failure = TRANSIENT, max_tries: int = 1):
        super().__init__(message)
        self.outcome = outcome
        self.max_tries = max(1, int(max_tries))


class ActuatorStopped(ActuatorError):
    """The service is stopping: the action was not started, or was killed. Not a try; the decision stays pending."""


@dataclass(frozen=True)
class ActOutcome:
    acted: int
    failed: int
    error: str | None = None
    retried: int = 0
    set_aside: int = 0
    expired: int = 0


class LogLimiter:
    """At most `burst` lines per `every_s` wall seconds; the lines held back are counted into the next one let
    through, so a failing actuator cannot flood the log (one line per failed try, at most)."""

    def __init__(self, burst: int = 10, every_s: float = 60.0, monotonic: Callable[[], float] = time.monotonic):
        self.burst, self.every_s, self.monotonic = burst, every_s, monotonic
        self._window_start: float | None = None
        self._sent = 0
        self.held = 0

    def warning(self, msg: str, *args) -> None:
        now = self.monotonic()
        if self._window_start is None or now - self._window_start >= self.every_s:
            self._window_start, self._sent = now, 0
        if self._sent >= self.burst:
            self.held += 1
            return
        self._sent += 1
        if self.held:
            msg += " (%d more failed tries not logged)"
            args = (*args, self.held)
            self.held = 0
        log.warning(msg, *args)


class _Marks:
    """Decisions carried out (and records with nothing to carry out) waiting to be marked acted, one batch at a time.
    A batch is stamped with the time it is marked, or with the time each decision gives (`add(..., at=)`): a
    decision stamped otherwise than the batch's starts a batch of its own."""

    def __init__(self, store, now: Callable[[], float]):
        self.store, self.now = store, now
        self.ids: list[int] = []
        self.at: int | None = None  # the batch's stamp, when its decisions give one
        self.records = 0  # how many of `ids` are records, not actions
        self.acted = 0  # actions marked so far

    def add(self, decision_id: int, action: bool, at: int | None = None) -> None:
        if self.ids and at != self.at:
            self.flush()
        self.ids.append(decision_id)
        self.at = at
        self.records += not action

    def flush(self) -> None:
        """Mark the batch in one transaction. An action a standby marked meanwhile is not counted twice."""
        if self.ids:
            marked = self.store.mark_acted_many(self.ids, int(self.now()) if self.at is None else self.at)
            self.acted += max(0, marked - self.records)
        self.ids, self.at, self.records = [], None, 0


class Acting:
    """The acting passes over one store and actuator; keeps each failing action's tries between passes."""

    def __init__(self, store, actuator, now: Callable[[], float], rules: RetryRules | None = None,
                 rng: random.Random | None = None, limiter: LogLimiter | None = None,
                 wall_seconds: Callable[[float], float] = lambda s: s, batch_size: int = ACT_BATCH_SIZE,
                 simulated: bool = False):
        self.store = store
        # A simulated pool carries a decision out in the hour it was decided for (its bill counts it from there), but
        # the act job reaches it on the wall, where a fast clock has run on by days or years: what the job does to a
        # decision is stamped with the decision's hour, never with the time the clock has run to.
        self.simulated = simulated
        self.batch_size = max(1, int(batch_size))
        self.wall_seconds = wall_seconds  # a simulation's clock seconds as wall seconds: lateness is judged on the wall
        self.actuator = actuator
        self.now = now
        self.rules = rules or RetryRules()
        self.rng = rng or random.Random()
        self.limiter = limiter or LogLimiter()
        self.tries: dict[int, Tries] = {}  # decision id -> its failed tries, while it waits for a retry
        self.counts = dict.fromkeys(ACT_OUTCOMES, 0)
        # Where the next pass starts reading the journal: every decision before it was marked or closed by an earlier
        # pass. Closed ones (set aside, expired) stay unacted for good, and re-reading them each pass grew with them.
        # Read from the start again under a new epoch and every FULL_READ_EVERY passes, so a decision whose
        # journaling committed late (a deposed leader's last hour) is never left behind.
        self._from_id = 0
        self._from_epoch: int | None = None
        self._passes = 0

    def run_pass(self, stop: Callable[[], bool] = lambda: False, epoch: int | None = None) -> ActOutcome:
        """One pass over the unacted, not set-aside decisions in journal order, under lease `epoch`; stops as soon
        as `stop()` says so (checked before each action) or the actuator is stopping.

        What was carried out is marked in batches of `batch_size`, one transaction each (and whatever is left when
        the pass ends, however it ends): a crash between acting and marking offers at most one batch again, each
        action with its key, for the receiver to drop as a repeat."""
        marks = _Marks(self.store, self.now)
        if epoch != self._from_epoch or self._passes % FULL_READ_EVERY == 0:
            self._from_id, self._from_epoch = 0, epoch
        self._passes += 1
        try:
            failed, error, retried, set_aside, n_expired, next_from = self._pass(stop, epoch, marks)
        finally:
            marks.flush()
        self._from_id = next_from  # only once what it passed is marked
        acted = marks.acted
        for name, n in (("done", acted), ("retried", retried), ("set-aside", set_aside), ("expired", n_expired)):
            self.counts[name] += n
        return ActOutcome(acted, failed, error, retried, set_aside, n_expired)

    def _pass(self, stop: Callable[[], bool], epoch: int | None, marks: "_Marks") -> tuple:
        failed = retried = set_aside = n_expired = 0
        error = None
        waiting: set[str] = set()  # cards with an earlier action still pending: their later ones wait
        rows = self.store.unacted(self._from_id)
        first_open: list[int] = []  # the first decision this pass leaves open (stopped at, waiting, to be retried)

        def keep(row: JournalRow) -> None:
            if not first_open:
                first_open.append(row.id)

        for row in rows:
            if stop():
                keep(row)
                break
            if len(marks.ids) >= self.batch_size:
                marks.flush()
            if row.kind not in ACTIONS:
                marks.add(row.id, action=False, at=self._stamp(row))
                continue
            card = row.card_key or ""
            if card in waiting:
                keep(row)
                continue
            now = self.now()
            if expired(self.rules, row.ts, now, late_s=self.wall_seconds):
                self._close(row, Kind.ACT_EXPIRED, f"{row.kind} {card} not acted: its hour ended more than "
                            f"{self.rules.expire_after_s:g} s ago", now)
                n_expired += 1
                continue
            before = self.tries.get(row.id)
            if before is not None and before.next_ts > now:
                waiting.add(card)
                keep(row)
                continue
            try:
                self.actuator.act(row, epoch)
            except ActuatorStopped:
                keep(row)
                break
            except ActuatorError as err:
                failed += 1
                error = str(err)
                v = after_failure(self.rules, before, err.outcome, error, now, self.rng.random(), err.max_tries)
                if v.step is NextStep.RETRY:
                    self.tries[row.id] = v.tries
                    waiting.add(card)
                    keep(row)
                    retried += 1
                    self.limiter.warning("decision %s not acted (try %d, %s; next in %.0f s): %s", row.key, v.tries.count,
                                         err.outcome, v.tries.next_ts - now, error)
                else:
                    self.tries.pop(row.id, None)
                    self._close(row, Kind.ACT_FAILED, f"{row.kind} {card} set aside after {v.tries.count} "
                                f"{'try' if v.tries.count == 1 else 'tries'} ({v.reason}): {error}", now,
                                tries=v.tries, outcome=err.outcome)
                    set_aside += 1
                continue
            self.tries.pop(row.id, None)
            marks.add(row.id, action=True, at=self._stamp(row))
        next_from = first_open[0] if first_open else rows[-1].id + 1 if rows else self._from_id
        return failed, error, retried, set_aside, n_expired, next_from

    def _stamp(self, row: JournalRow) -> int | None:
        """When what the act job does to `row` is stamped: on a simulated pool, its decided hour (never later than the
        clock); elsewhere None, the time it is done."""
        return min(int(row.ts), int(self.now())) if self.simulated else None

    def _close(self, row: JournalRow, kind: str, reason: str, now: float, tries: Tries | None = None,
               outcome: Failure = PERMANENT) -> None:
        """Journal the record that closes an action never carried out (the decision itself stays unacted)."""
        stamp = self._stamp(row)
        now = now if stamp is None else stamp
        closed = SetAsideRecord(decision_key=row.key, decision_id=row.id, decision_kind=row.kind, hour_ts=row.ts)
        if tries is not None:
            closed = replace(closed, tries=tries.count, first_try_ts=tries.first_ts, outcome=outcome, error=tries.last_error)
        self.store.set_aside(JournalEntry(f"{row.key or row.id}:{kind}", int(now), kind, reason, row.card_key,
                                          detail=closed.to_detail(), acted=True))
        if kind == Kind.ACT_FAILED:
            log.warning("decision %s set aside: %s", row.key, reason)
        else:
            log.info("decision %s expired: %s", row.key, reason)
