"""The journal's schema: its kinds, and each kind's `detail` as a typed record, the one place the journal's JSON
object is written or read (`storage.values` names them beside the rows that carry them).

A record's `to_detail()` is the object a row stores in `decisions.detail_json`, key for key and in the order it was
always written (`fleet plan --json` prints it in that order; `fleet journal --json` and the actuators' payload pass
the stored object on untouched). `from_detail` reads a stored object back, from today's stores and older ones
alike: a key a record does not know is left aside, a key an older store never wrote reads as its default. Readers
take `row.record` (`storage.values.JournalRow.record`), never the object's keys.

Some keys are written only when they say something (a forecast, a dip, a class median): those fields carry
`omit` in their metadata, the test that leaves them out, so a record reads back to the object it was built from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, Callable, ClassVar, Mapping, Sequence


# -- the kinds -------------------------------------------------------------------------------------------------------


class Kind(StrEnum):
    """What a journal row is: the one list of kinds, read by the journal, acting, reconcile, `fleet journal`,
    `explain`, `status`, the snapshot and the metrics. A `StrEnum`, so a stored row's text is its kind."""

    SIZE = "size"  # an hour's sizing: target, scored capacity, the run set (a record: nothing to carry out)
    EVICTION_PASS = "eviction-pass"  # a decision hour's eviction pass: who was judged, the rule's line (a record)
    EVICT = "evict"  # an action on one card, carried out by the actuator
    ADD = "add"
    RELEASE = "release"
    ACT_FAILED = "act-failed"  # an action set aside after its tries (permanent, or out of retry budget)
    ACT_EXPIRED = "act-expired"  # an action whose hour ended too long before it could be tried
    RECONCILE = "reconcile"  # the journal and the pool's telemetry disagreeing about a card, or agreeing again
    RETIRE = "retire"  # an operator marked a card gone by hand (`fleet card retire`)
    DEMAND_CORRECTION = "demand-correction"  # stored demand samples written over by `fleet ingest --demand --replace`


ACTION_KINDS = (Kind.EVICT, Kind.ADD, Kind.RELEASE)
"""What an actuator carries out."""
SET_ASIDE_KINDS = (Kind.ACT_FAILED, Kind.ACT_EXPIRED)
"""An action closed without being carried out: set aside, or too late."""
DECISION_KINDS = (Kind.SIZE, Kind.EVICTION_PASS, *ACTION_KINDS)
"""What the decide job writes for an hour."""
EVENT_KINDS = (Kind.RECONCILE, Kind.RETIRE, Kind.DEMAND_CORRECTION)
"""Records of what happened outside the decisions: the journal and the pool disagreeing about a card (and agreeing
again), a card retired by hand, measured demand corrected by hand."""


# -- the records -----------------------------------------------------------------------------------------------------

_NONE = lambda v: v is None  # noqa: E731
_EMPTY = lambda v: not v  # noqa: E731
_FALSE = lambda v: v is False or v is None  # noqa: E731


def _opt(default: Any = None, omit: Callable[[Any], bool] = _NONE, factory: Callable[[], Any] | None = None):
    """A field written only when `omit(value)` is false."""
    if factory is not None:
        return field(default_factory=factory, metadata={"omit": omit})
    return field(default=default, metadata={"omit": omit})


class Record:
    """One journal kind's detail: built by the producer, stored by `to_detail`, read back by `from_detail`."""

    kinds: ClassVar[tuple[Kind, ...]] = ()

    @classmethod
    def from_detail(cls, detail: Mapping | None):
        """The record of a stored detail object (None or `{}`: every field at its default)."""
        d = detail or {}
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def to_detail(self) -> dict:
        """The detail object to store, in the order its keys were always written."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            omit = f.metadata.get("omit")
            if omit is not None and omit(v):
                continue
            out[f.name] = v
        return out


def _dict() -> dict:
    return {}


# -- an hour's records: written by the decide job ---------------------------------------------------------------


@dataclass(frozen=True)
class SizeRecord(Record):
    """An hour's sizing: what the run set was sized to, and what the hysteresis carries to the next hour."""

    kinds: ClassVar = (Kind.SIZE,)
    hour: int | None = None  # the hour of the month
    mode: str | None = None
    window: str | None = None  # the sizing window's name (`day`, `hour`, ...)
    target_tps: float | None = None
    scored_capacity_tps: float | None = None
    demand_tps: float | None = None
    demand_forecast_tps: float | None = _opt()  # the forecast the hour was sized to; none before anything is measured
    knew_demand: bool = _opt(False, _FALSE)  # the policy was handed the hour's true demand (a clairvoyant figure)
    run_set_cards: int | None = None
    budget_left: int | None = None  # evictions the month's budget still allows after the hour
    held_out_hours: Mapping[str, int] = field(default_factory=_dict)  # warm cards left out, with their hours
    in_dip: Sequence[str] | None = _opt()  # cards the estimator scored as in a dip (an estimator policy only)
    dip_allowance: float = _opt(0.0, _EMPTY)
    not_counted: Mapping[str, str] = _opt(omit=_EMPTY, factory=_dict)  # warm in the journal, not counted (card -> why)
    counted_running: Mapping[str, str] = _opt(omit=_EMPTY, factory=_dict)  # released in the journal, still running
    demand_measured_tps: float | None = _opt()  # the demand the hour had: noted once it is billed
    # Hours just before this one with no demand measured: the forecast fell back on the last measured level.
    demand_unmeasured_hours: int = _opt(0, _EMPTY)
    # Under a promise ([slo]) sized to (`fleet.core.latency`): the promise, each run-set card's rate at it (its own
    # fitted curve's, else its score on its class's), and what the run set is expected to give at the hour's demand:
    # its slowest stream and the first-token wait at the percentile (none, and `ttft_beyond_slots`, when its slots
    # cannot carry the requests: JSON has no infinity).
    slo_stream_tps: float | None = _opt()
    slo_ttft_ms: float | None = _opt()
    slo_percentile: float | None = _opt()
    rate_at_promise_tps: Mapping[str, float] = _opt(omit=_EMPTY, factory=_dict)
    run_set_rate_at_promise_tps: float | None = _opt()
    stream_expected_tps: float | None = _opt()
    ttft_expected_s: float | None = _opt()
    ttft_beyond_slots: bool = _opt(False, _FALSE)
    added_for_latency: Sequence[str] = _opt(omit=_EMPTY, factory=list)  # cards added for the first token's slots

    @property
    def promised(self) -> bool:
        """The hour was sized to a promise."""
        return self.slo_stream_tps is not None or self.slo_ttft_ms is not None

    @property
    def ttft_s(self) -> float | None:
        """The expected first-token wait as a number (inf: the slots cannot carry the requests; None: not read)."""
        return float("inf") if self.ttft_beyond_slots else self.ttft_expected_s

    @property
    def forecast_tps(self) -> float:
        """The forecast as a number (NaN: none)."""
        return float("nan") if self.demand_forecast_tps is None else float(self.demand_forecast_tps)


@dataclass(frozen=True)
class EvictionPassRecord(Record):
    """A decision hour's eviction pass: who was judged, by which line, and what the budget allowed."""

    kinds: ClassVar = (Kind.EVICTION_PASS,)
    hour: int | None = None
    rule: str | None = None
    window: str | None = None
    judged: int = 0
    candidates: Sequence[str] = field(default_factory=list)
    evicted: Sequence[str] = field(default_factory=list)
    median_score_tps: float | None = None
    threshold_tps: float | None = None
    blocked_by_budget: int = 0
    blocked_by_disruption: int = 0
    breaker_open: bool = False
    draining: int = 0
    allowed_now: int = 0
    budget_left_before: int | None = None
    budget_left_after: int | None = None
    scores: Mapping[str, float] = field(default_factory=_dict)  # card -> its score through the pass's window
    thresholds: Mapping[str, float] = field(default_factory=_dict)  # card -> the rule's own line for it
    class_median_score_tps: Mapping[str, float] | None = _opt()  # several classes: each class's median

    def threshold_of(self, card: str) -> float | None:
        """The line `card` was held to: its own, or the pass's where the rule drew one line for all."""
        return self.thresholds.get(card, self.threshold_tps)

    def median_of(self, card_class: str) -> float | None:
        """The median a card of `card_class` was judged against: the pass's, or its class's where classes differ."""
        m = self.median_score_tps
        if m is None or (isinstance(m, float) and math.isnan(m)):
            return (self.class_median_score_tps or {}).get(card_class, m)
        return m

    def verdict_of(self, card: str) -> str:
        """What the pass did with `card` (one it judged), in `fleet explain`'s words."""
        if card in self.evicted:
            return "evicted"
        if card in self.candidates:
            return ("candidate, not evicted: the circuit breaker was open" if self.breaker_open
                    else "candidate, not evicted: held back by the budget (month's or cards draining at once)")
        return "kept: at or above the threshold"


@dataclass(frozen=True)
class EvictRecord(Record):
    """One card evicted: its score, the line it fell under, and the budget left after it."""

    kinds: ClassVar = (Kind.EVICT,)
    hour: int | None = None
    score_tps: float | None = None
    tokens_per_usd: float | None = None
    window: str | None = None
    threshold_tps: float | None = None
    median_score_tps: float | None = None
    budget_left: int | None = None  # after this card, as its reason says


@dataclass(frozen=True)
class ReleaseRecord(Record):
    """One card out of the run set: its score through the sizing window."""

    kinds: ClassVar = (Kind.RELEASE,)
    hour: int | None = None
    score_tps: float | None = None
    window: str | None = None


@dataclass(frozen=True)
class AddRecord(Record):
    """One card into the run set: its score through the sizing window, and the tokens a dollar of its rent buys."""

    kinds: ClassVar = (Kind.ADD,)
    hour: int | None = None
    score_tps: float | None = None
    window: str | None = None
    tokens_per_usd: float | None = None
    # Written by the reactive job only (`fleet.service.reactive`): what it measured, and until when the plan holds it.
    reactive: bool = _opt(False, _FALSE)
    backlog_tokens: float | None = _opt()
    demand_tps: float | None = _opt()
    scored_capacity_tps: float | None = _opt()
    held_until_ts: int | None = _opt()
    # Under a promise sized to: the card's rate at it, and whether it was added for the first token's slots (the
    # tokens were covered without it).
    rate_at_promise_tps: float | None = _opt()
    for_latency: bool = _opt(False, _FALSE)


# -- records that close an action: written by acting -----------------------------------------------------------------


@dataclass(frozen=True)
class SetAsideRecord(Record):
    """An action closed without being carried out (`act-failed` after its tries, `act-expired` too late): which
    decision it closes and, for a failed one, its tries."""

    kinds: ClassVar = (Kind.ACT_FAILED, Kind.ACT_EXPIRED)
    decision_key: str | None = None
    decision_id: int | None = None
    decision_kind: str | None = None
    hour_ts: int | None = None
    tries: int | None = None  # the four below are written together, for a failed action only
    first_try_ts: float | None = None
    outcome: str | None = None
    error: str | None = None

    _TRIES: ClassVar = ("tries", "first_try_ts", "outcome", "error")

    def to_detail(self) -> dict:
        out = {"decision_key": self.decision_key, "decision_id": self.decision_id, "decision_kind": self.decision_kind,
               "hour_ts": self.hour_ts}
        if self.tries is not None:
            out.update({k: getattr(self, k) for k in self._TRIES})
        return out


# -- records of what happened to a card outside the decisions ----------------------------------------------------------


@dataclass(frozen=True)
class ReconcileRecord(Record):
    """The journal and the pool's telemetry disagreeing about a card (`seen`, since when), or agreeing again
    (`cleared`, with the key of the record it clears)."""

    kinds: ClassVar = (Kind.RECONCILE,)
    mismatch: str | None = None  # the kind of mismatch (`silent`, `still-serving`)
    state: str | None = None  # `seen` or `cleared`
    since_ts: int | None = _opt()
    seen_key: str | None = _opt()

    @property
    def seen(self) -> bool:
        return self.state == "seen"


@dataclass(frozen=True)
class RetireRecord(Record):
    """A card an operator retired by hand: who, and why."""

    kinds: ClassVar = (Kind.RETIRE,)
    by: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class DemandCorrectionRecord(Record):
    """Stored demand samples an ingest wrote over (`--replace`): the source, the part, how many, and each second's
    [ts, old tok/s, new tok/s] (the first `storage.demand.JOURNALED_CHANGES`)."""

    kinds: ClassVar = (Kind.DEMAND_CORRECTION,)
    source: str | None = None
    part: str | None = None
    replaced: int = 0
    changes: Sequence[Sequence[float]] = field(default_factory=list)


RECORDS: dict[Kind, type[Record]] = {k: r for r in (SizeRecord, EvictionPassRecord, EvictRecord, ReleaseRecord, AddRecord,
                                                    SetAsideRecord, ReconcileRecord, RetireRecord, DemandCorrectionRecord)
                                     for k in r.kinds}
"""Each kind's record: every kind has one, and every field a default (a test holds them to that)."""


def record_of(kind: str, detail: Mapping | None) -> Record:
    """The typed record of a stored row's `kind` and `detail`."""
    try:
        cls = RECORDS[Kind(kind)]
    except (ValueError, KeyError):
        raise ValueError(f"journal kind {kind!r}: not one of {', '.join(RECORDS)}") from None
    return cls.from_detail(detail)

