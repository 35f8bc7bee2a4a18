"""The values that cross the store's interfaces: plain frozen dataclasses, no database in them.

Telemetry (`TelemetryStore`): a card class as declared, a card as stored, one
batch's valid samples and rejected records, what became of the batch, and what a prune deleted.
Journal (`JournalStore`): a decision to journal, a journaled row read back (each
with its kind's typed record; the kinds and records are the journal's schema,
`storage.records`), one billed hour, and the score rows' keys that are not
windows. This module imports only `storage.records` at run time, so code that
only names these types (or the protocols in `storage.interfaces`) pays for
neither SQLAlchemy nor pandas.
"""

from __future__ import annotations

from collections import abc
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from typing import TYPE_CHECKING, Iterable, Mapping

from storage.records import ACTION_KINDS, DECISION_KINDS, EVENT_KINDS, SET_ASIDE_KINDS, Kind, record_of

if TYPE_CHECKING:
    import numpy as np

__all__ = ["ACTION_KINDS", "DECISION_KINDS", "EVENT_KINDS", "SET_ASIDE_KINDS", "Kind"]  # the journal's kinds, from its schema


# -- telemetry ------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassSpec:
    """A card class as declared or registered; rated rate and rent are None when unknown."""

    name: str
    rated_tps: float | None = None
    rent_usd_per_month: float | None = None


def class_specs(classes: Iterable) -> list[ClassSpec]:
    """The classes a preset, a pool file or the service's config declares (`CardClass`es), as the store keeps them:
    the one place a declared class becomes the store's record."""
    return [ClassSpec(c.name, c.rated_tps, c.rent_usd_per_month) for c in classes]


@dataclass(frozen=True)
class CardInfo:
    id: int
    card_key: str
    class_name: str
    rated_tps: float | None


@dataclass(frozen=True)
class BatchOrigin:
    """Where one batch of records comes from: its ingest run, its place in the source, and the source by name and
    digest (the quarantine keys a record by the digest and its number, so a source sent twice quarantines it once)."""

    run_id: int
    part: int  # the batch's number in its run, from 0
    first_record: int  # the number of its first record in the source (0-based)
    source: str
    source_digest: str


SERVING_COLUMNS = ("batch_mean", "tpot_s", "ttft_s", "ttft_ok_share")
"""What a serving stack measures beside a card's rate, as telemetry's optional columns and `serving_samples`' name
them: the mean batch (streams), the mean time per output token and to first token (seconds), and the share of first
tokens within the promise's time."""


@dataclass(frozen=True)
class SampleBatch:
    """Valid samples of one batch, one entry per record (cards by key, ts in UTC epoch seconds)."""

    card_key: np.ndarray  # object (str)
    ts: np.ndarray  # int64
    tokens_per_s: np.ndarray  # float64
    busy_fraction: np.ndarray  # float64, NaN where the record had none
    record_no: np.ndarray  # int64, the record's number in its source (0-based)
    serving: Mapping[str, np.ndarray] | None = None  # SERVING_COLUMNS the source gave, float64, NaN where a record had none

    def __len__(self) -> int:
        return int(self.ts.size)

    def take(self, keep: np.ndarray) -> "SampleBatch":
        """The samples at `keep` (a mask or positions)."""
        serving = None if self.serving is None else {c: v[keep] for c, v in self.serving.items()}
        return SampleBatch(self.card_key[keep], self.ts[keep], self.tokens_per_s[keep], self.busy_fraction[keep],
                           self.record_no[keep], serving)


@dataclass(frozen=True)
class Rejected:
    """Records of one batch that will not be stored: their number, raw text and reason."""

    record_no: list[int] = field(default_factory=list)
    raw_text: list[str] = field(default_factory=list)
    reason: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.record_no)


@dataclass(frozen=True)
class BatchOutcome:
    """What became of one batch's records: stored + duplicates + quarantined = read."""

    read: int
    stored: int
    duplicates: int
    quarantined: int
    reasons: dict[str, int]
    registered: tuple[CardInfo, ...] = ()


@dataclass(frozen=True)
class DemandBatch:
    """Measured demand samples of one part (`offered`: the whole demand; `unserved`: the part not served)."""

    part: str
    ts: np.ndarray  # int64, UTC epoch seconds
    demand_tps: np.ndarray  # float64, finite (>= 0 but for a draining queue's `unserved`)
    record_no: np.ndarray | None = None  # each sample's record in its source (None: 1, 2, ...)

    def __len__(self) -> int:
        return int(self.ts.size)

    @property
    def records(self) -> np.ndarray:
        import numpy as np

        return self.record_no if self.record_no is not None else np.arange(1, len(self) + 1, dtype=np.int64)


@dataclass(frozen=True)
class Pruned:
    """What a prune of raw samples deleted: samples of `cards` cards, from whole hours before `before_ts`."""

    samples: int
    cards: int
    before_ts: int


# -- the journal ----------------------------------------------------------------------


@dataclass(frozen=True)
class JournalEntry:
    """A decision to journal. `acted` entries are records with nothing to carry out."""

    key: str
    ts: int
    kind: Kind
    reason: str
    card_key: str | None = None
    detail: Mapping | None = None  # the kind's record as stored (`storage.records`: build it with `to_detail()`)
    acted: bool = False

    @cached_property
    def record(self):
        """The detail as its kind's typed record (`storage.records`)."""
        return record_of(self.kind, self.detail)


@dataclass(frozen=True)
class JournalRow:
    id: int
    key: str | None
    ts: int
    kind: Kind
    card_key: str | None
    reason: str
    detail: dict  # as stored: what `fleet journal --json` and the actuators pass on; readers take `record`
    acted_ts: int | None

    @cached_property
    def record(self):
        """The detail as its kind's typed record (`storage.records`)."""
        return record_of(self.kind, self.detail)


class ScoreKey(IntEnum):
    """The `scores` rows' window keys that are not a window's hours (a window is an hour or more): the policy's
    estimator score, and the cards it scored as in a dip (score 1). Stored as their numbers."""

    POLICY = 0
    IN_DIP = -1

    @property
    def label(self) -> str:
        """Its name in `fleet status --json`'s `scores`."""
        return self.name.lower()


def score_key_label(window_hours: int) -> str:
    """A `scores` key as `fleet status --json` names it: `policy`, `in_dip`, or the window's hours."""
    try:
        return ScoreKey(window_hours).label
    except ValueError:
        return str(window_hours)


@dataclass(frozen=True)
class HourFigures:
    """One billed hour, as written to `service_hours`."""

    hour_ts: int
    month_start_ts: int
    demand_tps: float
    capacity_tps: float
    delivered_tps: float
    scored_capacity_tps: float
    cards_warm: int
    warm_usd: float
    churn_usd: float
    idle_usd: float
    ideal_usd: float
    evictions: int
    wrong_evictions: int
    demand_measured_tps: float | None = None  # the demand the hour had, once it is over (None: none measured)
    goodput_tps: float | None = None  # under a promise: tokens/s served within it (None: no promise)


@dataclass(frozen=True, eq=False)
class ScoreColumn(abc.Mapping):
    """One hour's scores through one window, as the score job's arrays: card key → (score_tps, tokens_per_usd) for
    the pool's rows `rows`. A Mapping like any other hour of `record_scores`, but the store writes it from the
    arrays (`card_ids` are the store's ids of `card_keys`), without a Python object per card."""

    card_keys: tuple[str, ...]
    card_ids: np.ndarray  # (cards,) int64
    rows: np.ndarray  # indices into card_keys / card_ids of the cards scored
    score_tps: np.ndarray  # (cards,)
    tokens_per_usd: np.ndarray  # (cards,)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(card id, score_tps, tokens_per_usd) of the cards scored, as int64 / float64."""
        import numpy as np

        r = self.rows
        return (self.card_ids[r].astype(np.int64), self.score_tps[r].astype(np.float64),
                self.tokens_per_usd[r].astype(np.float64))

    @cached_property
    def _by_key(self) -> dict[str, tuple[float, float]]:
        """The plain mapping, built on first look-up only (the store never needs it)."""
        _, score, tpd = self.arrays()
        return dict(zip((self.card_keys[i] for i in self.rows.tolist()), zip(score.tolist(), tpd.tolist())))

    def __getitem__(self, key: str) -> tuple[float, float]:
        return self._by_key[key]

    def __iter__(self):
        return (self.card_keys[i] for i in self.rows.tolist())

    def __len__(self) -> int:
        return len(self.rows)
