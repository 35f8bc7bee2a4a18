"""The decide pipeline, wired once for `fleet serve` and `fleet plan`: score → what the pool is known to run → the
step → the journal's rows.

`decide_pipeline` builds the score job (`scoring.py`), the reconcile side
(`reconcile.py`: what the pool is known to run each hour, and the check against
its telemetry) and the decide job (`decide.py`) on one `Frame`. `fleet serve`
gives it the journal that writes and acts (`journal.py`); `fleet plan` gives it a
store opened read only, scores kept in memory (`writes=False`), a journal that
keeps the hour's rows (`KeptJournal`) and the store's pool as serve will declare
it (`DeclaredPool`). Both read every input the same way (a silent card, an action
set aside), so the plan is what serve then decides.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from fleet.service.calendar import Calendar
from fleet.service.decide import DecideJob
from fleet.service.demand import service_demand
from fleet.service.frame import Frame, Lead
from fleet.service.pool import PoolWatch
from fleet.service.reconcile import Reconciler
from fleet.service.curves import class_curves
from fleet.service.scoring import Promise, ScoreJob

if TYPE_CHECKING:
    from fleet.core.plugins import PolicyParts
    from fleet.service.config import ServiceConfig
    from fleet.service.decide import HourJournal
    from fleet.service.simulation import Clock, Simulation
    from storage.interfaces import Store, TelemetryStore


def make_calendar(cfg: ServiceConfig, sim: Simulation | None = None) -> Calendar:
    if sim is None:
        return Calendar(cfg.month.start_ts, cfg.month.hours, cfg.schedule.settle_s)
    return Calendar(cfg.month.start_ts, cfg.month.hours, cfg.schedule.settle_s, sim.start_ts, sim.end_ts, sim.first_ts)


def policy_windows(parts: PolicyParts) -> dict[str, int]:
    """The windows the policy reads (name -> hours): sizing first, eviction last."""
    p = parts.policy
    return {p.window: parts.size_window_hours, p.eviction_window: parts.evict_window_hours}


def make_frame(cfg: ServiceConfig, parts: PolicyParts, store: Store, telemetry: TelemetryStore, clock: Clock,
               sim: Simulation | None = None) -> Frame:
    """The frame a service (or a plan) of `cfg` decides in: `telemetry` is the pool's store as the jobs read it."""
    return Frame(parts, make_calendar(cfg, sim), clock, PoolWatch(telemetry, cfg.month.hours),
                 service_demand(telemetry, cfg.month.hours, sim))


@dataclass(frozen=True)
class DecidePipeline:
    """The three jobs an hour is decided through, on one frame."""

    scoring: ScoreJob
    reconciler: Reconciler
    decide: DecideJob


def decide_pipeline(cfg: ServiceConfig, frame: Frame, store: Store, journal: HourJournal, windows: dict[str, int],
                    watermark_ts: Callable[[float], int], lead: Lead = Lead(), writes: bool = True) -> DecidePipeline:
    """Score job → what the pool is known to run → the step → the journal's rows, on `store`'s roles. The reconcile
    check reads a real pool's telemetry only (a simulation's feed reports every card, warm or not)."""
    scoring = ScoreJob(store.journal, frame, windows, watermark_ts, lead, busy_floor=cfg.ingest.busy_floor, writes=writes,
                       promise=Promise(cfg.slo, class_curves(cfg.pool)))
    reconciler = Reconciler(store.journal, store.reconcile, frame.clock, cfg.reconcile.silent_after_s,
                            enabled=not frame.calendar.simulated)
    decide = DecideJob(store.journal, journal, frame, scoring, reconciler, lead, terms=cfg)  # cfg: its promise too
    return DecidePipeline(scoring, reconciler, decide)


class KeptJournal:
    """Stands where the decide job's journal does in a plan: the hour's rows and run-set changes are kept, not
    written, and nothing is acted on."""

    def __init__(self):
        self.written: list[tuple] = []

    def write(self, hour_ts, entries, open_cards, close_cards, retire_cards) -> None:
        self.written.append((hour_ts, list(entries), dict(open_cards), list(close_cards), list(retire_cards)))

    def act_soon(self, stopping, epoch=None) -> None:
        return None


class DeclaredPool:
    """The store's classes and cards as `fleet serve` sees them once it has declared the config's pool (each class's
    rated rate and rent, the cards it names), read without writing anything: a store that only ingested telemetry
    holds its classes without a rent until serve writes the config's, and the plan must be what serve then decides.
    Every other read is the telemetry store's own."""

    def __init__(self, telemetry: TelemetryStore, pool):
        self._telemetry = telemetry
        self._pool = pool

    def card_count(self) -> int:
        return self._telemetry.card_count()

    def rollup_means(self, since_ts: int, until_ts: int, busy_floor: float):
        return self._telemetry.rollup_means(since_ts, until_ts, busy_floor)

    def demand_hours(self, since_ts: int, until_ts: int):
        return self._telemetry.demand_hours(since_ts, until_ts)

    def serving_samples(self, since_ts: int, until_ts: int):
        return self._telemetry.serving_samples(since_ts, until_ts)

    def classes(self) -> dict:
        from storage.values import class_specs

        got = dict(self._telemetry.classes())
        got.update({c.name: c for c in class_specs(self._pool.classes)})  # as `declare_classes` updates them
        return got

    def cards(self) -> dict:
        from storage.values import CardInfo

        classes = self.classes()
        got = {k: replace(c, rated_tps=classes[c.class_name].rated_tps) if c.class_name in classes else c
               for k, c in self._telemetry.cards().items()}
        next_id = max((c.id for c in got.values()), default=0) + 1
        for card in self._pool.cards:  # as `declare_cards` adds them: new ids after the store's, a known card kept
            if card.card_id not in got:
                spec = classes.get(card.card_class)
                got[card.card_id] = CardInfo(next_id, card.card_id, card.card_class, spec.rated_tps if spec else None)
                next_id += 1
        return got
