"""The one read model of the service's store: what `fleet status`, `fleet explain`, `fleet plan`, `fleet journal`
and the metrics snapshot show, each figure read or worked out here, once.

`MonthView` is the month on view (the one last billed) and `CardView` one card's story; each reads a figure from
the store the first time it is asked for and keeps it, so a reader pays only for what it shows. `HourPlan` reads
an hour's journal rows before they are written (`fleet plan`). Journal details are read through their typed
records (`storage.records`), never by key.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Sequence

import numpy as np

from fleet.core.goodput import goodput_totals
from fleet.core.units import HOUR_S, NO_END_TS
from fleet.core.verdict import checks as judge_checks
from fleet.core.verdict import month_totals
from storage.records import EvictionPassRecord, SetAsideRecord, SizeRecord
from storage.values import ACTION_KINDS, SET_ASIDE_KINDS, HourFigures, JournalEntry, JournalRow, Kind, ScoreKey

if TYPE_CHECKING:
    from fleet.service.calendar import Calendar
    from storage.interfaces import JournalStore

FORECAST_ERROR_HOURS = 24
"""The recent forecast error is measured over the last day of billed hours."""


def stored_month_totals(hours: Sequence[HourFigures]) -> dict[str, float]:
    """The month-to-date totals of the billed hours the store holds: the core's `month_totals` over them, and under a
    promise (hours billed with their goodput) the core's `goodput_totals` over those hours, which the checks then
    read as a replayed month's verdict does (capacity on goodput, and latency)."""
    col = lambda name, of=hours: np.array([getattr(h, name) for h in of], dtype=np.float64)  # noqa: E731
    totals = month_totals(col("warm_usd"), col("churn_usd"), col("idle_usd"), col("ideal_usd"), col("demand_tps"),
                          col("delivered_tps"), int(sum(h.evictions for h in hours)),
                          int(sum(h.wrong_evictions for h in hours)))
    promised = [h for h in hours if h.goodput_tps is not None]
    if promised:
        totals.update(goodput_totals(col("goodput_tps", promised), col("delivered_tps", promised),
                                     col("demand_tps", promised)))
    return totals


def forecast_error_tps(forecast_tps: Sequence[float], measured_tps: Sequence[float]) -> float:
    """Mean |forecast − measured| over the hours that have both (NaN when none has)."""
    f, m = np.asarray(forecast_tps, dtype=np.float64), np.asarray(measured_tps, dtype=np.float64)
    ok = np.isfinite(f) & np.isfinite(m)
    return float(np.mean(np.abs(f[ok] - m[ok]))) if ok.any() else float("nan")


def size_at(store: JournalStore, hour_ts: int | None) -> SizeRecord | None:
    """The `size` record of the hour starting at `hour_ts` (None: no hour, or none decided there)."""
    if hour_ts is None:
        return None
    got = store.decisions(kinds=[Kind.SIZE], since_ts=hour_ts, until_ts=hour_ts + 1, limit=1)
    return got[0].record if got else None


def promise_of(size: SizeRecord | None) -> dict | None:
    """The promise an hour was sized to and what its run set is expected to give the users at its demand, as
    `status`, `explain` and `plan` show it (None: no promise, or an hour journaled before promises were)."""
    if size is None or not size.promised:
        return None
    return {"stream_tps": size.slo_stream_tps, "ttft_ms": size.slo_ttft_ms, "percentile": size.slo_percentile,
            "run_set_rate_at_promise_tps": size.run_set_rate_at_promise_tps,
            "stream_expected_tps": size.stream_expected_tps, "ttft_expected_s": size.ttft_expected_s,
            "ttft_beyond_slots": size.ttft_beyond_slots,
            "rate_at_promise_tps": dict(size.rate_at_promise_tps), "added_for_latency": list(size.added_for_latency)}


class MonthView:
    """The month on view, as every reader shows it: its billed hours and their totals, and the last decided hour's
    sizing, run set, evictions and scores. Each figure is read from the store on first use and kept."""

    def __init__(self, store: JournalStore, month_start_ts: int, month_end_ts: int = NO_END_TS, measured_demand: bool = False):
        self.store = store
        self.month_start_ts = int(month_start_ts)
        self.month_end_ts = int(month_end_ts)
        # A real pool's month: an hour billed with no demand measured (`demand_measured_tps` None: the demand source
        # and the telemetry both silent) is unmeasured, and the checks skip it rather than read it as no demand.
        self.measured_demand = measured_demand

    @classmethod
    def on_view(cls, store: JournalStore, calendar: Calendar | None = None, now_ts: float | None = None,
                measured_demand: bool = False) -> MonthView | None:
        """The month last billed (at a month's end it stays on view until the next bills); with no billed hour,
        the calendar's month at `now_ts`, or without a calendar the month of the last decided hour (its `size`
        record says which hour of its month it is), or None when no hour is decided. Without a calendar the month's
        end is not known, and the last decided hour is the store's last."""
        last_b = store.last_billed_ts()
        if calendar is None:
            if last_b is not None:
                m0 = store.month_start_of(last_b)
            else:
                last_d = store.last_decided_ts(0, NO_END_TS)
                size = size_at(store, last_d)
                m0 = None if size is None or size.hour is None else last_d - int(size.hour) * HOUR_S
            return None if m0 is None else cls(store, m0, measured_demand=measured_demand)
        m0 = calendar.month_of(last_b)[0] if last_b is not None else calendar.current_month_start(now_ts)
        return cls(store, m0, calendar.month_end_ts(m0), measured_demand)

    @cached_property
    def hours(self) -> list[HourFigures]:
        return self.store.hours(self.month_start_ts)

    @cached_property
    def totals(self) -> dict[str, float]:
        return stored_month_totals(self.hours)

    @cached_property
    def unmeasured_hours(self) -> list[HourFigures]:
        """The billed hours of a real pool with no demand measured (none for a simulation)."""
        return [h for h in self.hours if h.demand_measured_tps is None] if self.measured_demand else []

    @cached_property
    def figures(self) -> dict[str, float]:
        """The totals as the checks read them: over the hours whose demand was measured (the evictions over all)."""
        measured = [h for h in self.hours if h.demand_measured_tps is not None] if self.unmeasured_hours else self.hours
        return {**stored_month_totals(measured), "evictions": int(self.totals["evictions"]),
                "wrong_evictions": int(self.totals["wrong_evictions"])}

    def checks(self, marks) -> dict:
        """The core's checks over the month's billed hours with their demand measured (none before the first)."""
        return judge_checks(self.figures, marks) if len(self.hours) > len(self.unmeasured_hours) else {}

    @cached_property
    def last_billed_ts(self) -> int | None:
        return self.hours[-1].hour_ts if self.hours else None

    @cached_property
    def last_decided_ts(self) -> int | None:
        got = self.store.last_decided_ts(self.month_start_ts, self.month_end_ts)
        return got if got is not None else self.last_billed_ts

    @property
    def hours_decided(self) -> int:
        return 0 if self.last_decided_ts is None else (self.last_decided_ts - self.month_start_ts) // HOUR_S + 1

    @cached_property
    def size(self) -> SizeRecord | None:
        """The last decided hour's sizing."""
        return size_at(self.store, self.last_decided_ts)

    @cached_property
    def billed_size(self) -> SizeRecord | None:
        """The last billed hour's sizing: the forecast it was billed against."""
        return size_at(self.store, self.last_billed_ts)

    @cached_property
    def run_set(self) -> list[str]:
        return sorted(self.store.run_set_at(self.last_decided_ts)) if self.last_decided_ts is not None else []

    @cached_property
    def reactive_adds(self) -> list:
        """The reactive loop's adds since the last decided hour began (`fleet.service.reactive`), oldest first: the
        cards it added within the hour the plan is in, each with its reason."""
        if self.last_decided_ts is None:
            return []
        from fleet.service.reactive import ROWS_READ

        return [r for r in self.store.decisions(kinds=[Kind.ADD], since_ts=self.last_decided_ts, limit=ROWS_READ)
                if r.record.reactive]

    @cached_property
    def evicted(self) -> dict[str, int]:
        """Card → the hour it was evicted, for the month's evictions through the last decided hour."""
        if self.last_decided_ts is None:
            return {}
        return {k: ts for ts, k in self.store.eviction_hours(self.month_start_ts, self.last_decided_ts + HOUR_S)}

    @cached_property
    def scores_by_window(self) -> dict[int, dict[str, float]]:
        """Every score stored at the last decided hour: window hours (or a `ScoreKey`) → card → tok/s."""
        if self.last_decided_ts is None:
            return {}
        return {_score_key(w): s for w, s in self.store.scores_by_window(self.last_decided_ts).items()}

    def action_counts(self) -> dict[str, dict[str, int]]:
        """The month's actions through its last decided hour, by kind (`adds`, `releases`, `evictions`): how many
        were decided and how many acted."""
        if self.last_decided_ts is None:
            return {}
        got = self.store.decision_counts(self.month_start_ts, self.last_decided_ts + HOUR_S)
        names = {Kind.ADD: "adds", Kind.RELEASE: "releases", Kind.EVICT: "evictions"}
        return {name: {"decided": got.get(kind, (0, 0))[0], "acted": got.get(kind, (0, 0))[1]} for kind, name in names.items()}

    @cached_property
    def breaker_open(self) -> bool:
        """Whether the month's last eviction pass found the circuit breaker open."""
        passes = self.store.decisions(kinds=[Kind.EVICTION_PASS], since_ts=self.month_start_ts, until_ts=self.month_end_ts)
        return bool(passes and passes[-1].record.breaker_open)

    @cached_property
    def set_aside(self) -> list[tuple[JournalRow, SetAsideRecord]]:
        """The month's actions closed without being carried out, oldest first, each with its record."""
        rows = self.store.decisions(kinds=list(SET_ASIDE_KINDS), since_ts=self.month_start_ts, limit=10_000)
        return [(r, r.record) for r in rows]

    def bill_by_part(self) -> dict[str, float]:
        """USD by bill line kind over the billed hours."""
        if self.last_billed_ts is None:
            return {}
        return self.store.bill_by_part(self.month_start_ts, self.last_billed_ts + HOUR_S)

    def recent_forecasts(self) -> tuple[float, float]:
        """(the last billed hour's measured demand, the mean forecast error over the recent billed hours)."""
        recent = list(self.hours[-FORECAST_ERROR_HOURS:])
        if not recent:
            return float("nan"), float("nan")
        sizes = {r.ts: r.record for r in self.store.decisions(kinds=[Kind.SIZE], since_ts=recent[0].hour_ts,
                                                                until_ts=recent[-1].hour_ts + 1)}
        nan = float("nan")
        measured = [nan if h.demand_measured_tps is None else h.demand_measured_tps for h in recent]
        forecast = [sizes[h.hour_ts].forecast_tps if h.hour_ts in sizes else nan for h in recent]
        return measured[-1], forecast_error_tps(forecast, measured)


def _score_key(w: int) -> int:
    try:
        return ScoreKey(w)
    except ValueError:
        return int(w)


def closed_by(store: JournalStore) -> dict[str, str]:
    """Decision key → the kind of the record that closed it without carrying it out (`act-failed`, `act-expired`)."""
    return {r.record.decision_key: r.kind for r in store.decisions(kinds=SET_ASIDE_KINDS, limit=1_000_000)}


# -- one card: `fleet explain` -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CardJudgement:
    """What one eviction pass made of a card it judged."""

    ts: int
    hour: int | None
    score_tps: float
    threshold_tps: float | None
    median_score_tps: float | None
    window: str | None
    verdict: str
    budget_left_before: int | None
    pass_reason: str

    @classmethod
    def of(cls, row: JournalRow, card: str, card_class: str) -> CardJudgement | None:
        """The pass `row`'s judgement of `card` (None: it did not judge it)."""
        p: EvictionPassRecord = row.record
        if card not in p.scores:
            return None
        return cls(row.ts, p.hour, p.scores[card], p.threshold_of(card), p.median_of(card_class), p.window,
                   p.verdict_of(card), p.budget_left_before, row.reason)


class CardView:
    """One card's decisions as `fleet explain` tells them: its evictions, the passes that judged it, its moves in and
    out of the run set, and where its latest score ranks it."""

    def __init__(self, store: JournalStore, card: str, card_class: str):
        self.store, self.card, self.card_class = store, card, card_class

    @cached_property
    def own(self) -> list[JournalRow]:
        return self.store.decisions(card_key=self.card)

    @property
    def evictions(self) -> list[JournalRow]:
        return [r for r in self.own if r.kind == Kind.EVICT]

    @property
    def warm_changes(self) -> list[JournalRow]:
        return [r for r in self.own if r.kind in (Kind.ADD, Kind.RELEASE)]

    @property
    def unacted(self) -> list[JournalRow]:
        """Its actions not carried out: still waiting, set aside or expired."""
        return [r for r in self.own if r.acted_ts is None and r.kind in ACTION_KINDS]

    @cached_property
    def closed(self) -> dict[str, str]:
        """Decision key -> the kind of the record that closed it without carrying it out (`act-failed`, `act-expired`)."""
        return {r.record.decision_key: r.kind for r in self.own if r.kind in SET_ASIDE_KINDS}

    def outcome(self, row: JournalRow) -> str:
        """What came of one of its actions: `acted`, `expired`, `set-aside`, or `waiting` (journaled, not yet acted on)."""
        if row.acted_ts is not None:
            return "acted"
        closed = self.closed.get(row.key)
        return "expired" if closed == Kind.ACT_EXPIRED else "set-aside" if closed == Kind.ACT_FAILED else "waiting"

    def outcomes(self) -> dict[str, int]:
        """How many of its actions came to each outcome that is not `acted`."""
        got: dict[str, int] = {}
        for r in self.unacted:
            got[self.outcome(r)] = got.get(self.outcome(r), 0) + 1
        return got

    def times_moved(self, kind: Kind) -> int:
        """How many of its adds (or releases) stand: carried out or still to be; one set aside or expired never moved it."""
        return sum(r.kind == kind and self.outcome(r) in ("acted", "waiting") for r in self.warm_changes)

    @cached_property
    def judged(self) -> list[CardJudgement]:
        got = (CardJudgement.of(p, self.card, self.card_class) for p in self.store.decisions(kinds=[Kind.EVICTION_PASS]))
        return [j for j in got if j is not None]

    @cached_property
    def last_decided_ts(self) -> int:
        return self.store.last_decided_ts(0, NO_END_TS) or 0

    @cached_property
    def run_set(self) -> set[str]:
        return self.store.run_set_at(self.last_decided_ts)

    @property
    def warm(self) -> bool:
        return self.card in self.run_set

    @cached_property
    def size(self) -> SizeRecord | None:
        """The last decided hour's sizing."""
        return size_at(self.store, self.last_decided_ts)

    @cached_property
    def rank(self) -> Rank | None:
        """Where the card's score at the last decided hour puts it among the cards scored through the sizing
        window (None: no sizing, or the card was not scored)."""
        if self.size is None:
            return None
        from policies import window_hours

        w = window_hours(str(self.size.window))
        scores = self.store.scores_by_window(self.last_decided_ts).get(w, {})
        if self.card not in scores:
            return None
        order = sorted(scores, key=lambda k: -scores[k])
        return Rank(w, scores[self.card], order.index(self.card) + 1, len(order))


@dataclass(frozen=True)
class Rank:
    window_hours: int
    score_tps: float
    rank: int
    of: int


# -- an hour not yet written: `fleet plan` ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HourPlan:
    """An hour's journal rows as the decide job would write them, read as `fleet plan` shows them."""

    entries: Sequence[JournalEntry]

    def of_kind(self, kind: Kind) -> list[JournalEntry]:
        return [e for e in self.entries if e.kind == kind]

    @property
    def size(self) -> JournalEntry:
        return self.of_kind(Kind.SIZE)[0]

    @property
    def eviction_pass(self) -> JournalEntry | None:
        got = self.of_kind(Kind.EVICTION_PASS)
        return got[0] if got else None

    def as_json(self) -> dict:
        """The size, eviction pass and actions, each its reason beside its record's fields (`fleet plan --json`)."""
        shown = lambda e: {"reason": e.reason, **e.record.to_detail()}  # noqa: E731
        card = lambda e: {"card": e.card_key, **shown(e)}  # noqa: E731
        p = self.eviction_pass
        return {"size": shown(self.size), **{k.value: [card(e) for e in self.of_kind(k)] for k in (Kind.ADD, Kind.RELEASE, Kind.EVICT)},
                "eviction_pass": None if p is None else shown(p)}

