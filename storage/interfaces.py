"""The store's interfaces, by role: what the shell may ask of it, and nothing more.

`TelemetryStore` is the telemetry side: the pool's classes and cards, ingest runs
written batch by batch, the hourly rollups read back (and, for the service and the operator commands, each
hour's rollup means, measured demand, the pool's size, ingest totals and quarantined records), and the retention of
raw samples. Ingest (a file, the drop folder, a Prometheus pull), the pool declaration, stored months, the
service's pool, scoring and snapshot and the ingest benchmark call it; `storage.repository.SqlRepository`
implements it.

`JournalStore` is the service's side, and reads no telemetry: the decision journal with the run-set
state each hour leaves, scores, billed hours and their bill lines. `storage.service_store.ServiceStore`
implements it.

Beside them, the smaller roles of the same database: `Leases` (who leads the
store; `storage.lease.LeaseStore`), `IdentityRecord` (what the store holds;
`storage.identity.SqlIdentity`), `ReconcileStore` (cards retired by hand, each
card's last telemetry, and the journal records the reconcile check reads and
writes; `storage.cards.SqlReconcileStore`) and `Migrations` (the schema's
revision and its upgrade; `storage.db.SqlMigrations`). `Store` gathers them:
`storage.open.open_store(url)` returns one, the shell's only way into a
database, so nothing outside `storage/` holds an engine.

Every member has a caller in `fleet/` or `bench/` (tests/storage/test_interfaces.py
checks it, and that the classes have no public method beyond their protocol), so a
method only a test calls has no place here. Every protocol is `runtime_checkable`.
This module imports nothing at run time beyond `typing` and `storage.values`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, AbstractSet, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from storage.busy import BUSY_FRACTION_FLOOR
from storage.values import BatchOrigin, BatchOutcome, CardInfo, ClassSpec, DemandBatch, HourFigures, JournalEntry, JournalRow, Pruned, Rejected, SampleBatch

if TYPE_CHECKING:
    from storage.demand import DemandHour, DemandOutcome
    from storage.identity import StoreIdentity
    from storage.lease import LeaseRecord
    import numpy as np
    import pandas as pd


@runtime_checkable
class TelemetryStore(Protocol):
    """Telemetry in and rollups out: ingest, the drop folder, Prometheus ingest, stored months."""

    # -- the pool -------------------------------------------------------------------
    def declare_classes(self, classes: Iterable[ClassSpec]) -> None:
        """Add classes, or update the rated rate and rent of classes already known."""

    def declare_cards(self, cards: Mapping[str, str], now_ts: int) -> None:
        """Add cards (card key → class name); a class not yet known is added with unknown rates."""

    def classes(self) -> dict[str, ClassSpec]: ...

    def cards(self) -> dict[str, CardInfo]: ...

    # -- ingest -----------------------------------------------------------------------
    def begin_run(self, source: str, source_digest: str, now_ts: int) -> int: ...

    def write_batch(self, origin: BatchOrigin, samples: SampleBatch, rejected: Rejected, register: Mapping[str, str],
                    now_ts: int, raw_text_of: Callable[[list[int]], list[str]] | None = None,
                    duplicates_in_batch: int = 0) -> BatchOutcome:
        """Store one batch in one transaction: register new cards, store new samples, quarantine the rest, update rollups."""

    def finish_run(self, run_id: int, now_ts: int) -> None: ...

    # -- reading ----------------------------------------------------------------------
    def hourly_rollups(self, start_ts: int | None = None, end_ts: int | None = None,
                       busy_floor: float = BUSY_FRACTION_FLOOR) -> pd.DataFrame:
        """Hourly rollups in [start_ts, end_ts): card_key, card_class, hour_ts, sample_count, mean_tps, busy_fraction, busy_tps."""

    def sample_count(self) -> int: ...

    # -- as the service and the operator commands read it (`storage.telemetry_reads`) --------
    def card_count(self) -> int: ...

    def card_class(self, card_key: str) -> str | None: ...

    def rollup_means(self, since_ts: int, until_ts: int, busy_floor: float = BUSY_FRACTION_FLOOR) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def last_rollup_ts(self) -> int | None: ...

    def serving_samples(self, since_ts: int, until_ts: int) -> dict[str, np.ndarray]: ...

    def demand_hours(self, since_ts: int, until_ts: int) -> dict[int, DemandHour]:
        """Each hour in [since_ts, until_ts) with a part of its demand measured: served, unserved and offered tok/s."""

    def last_demand_sample_ts(self) -> int | None:
        """The newest second a demand source measured (None: none ever): when it last answered."""

    def ingest_totals(self) -> dict[str, int]: ...

    def quarantine_reasons(self) -> dict[str, int]: ...

    def quarantined(self, reason: str | None = None, source: str | None = None, limit: int = 100) -> tuple[list[dict], int]: ...

    # -- measured demand ----------------------------------------------------------------
    def write_demand_batch(self, origin: BatchOrigin, batch: DemandBatch, rejected: Rejected, now_ts: int,
                           raw_text_of: Callable[[list[int]], list[str]], duplicates_in_batch: int = 0,
                           replace: bool = False) -> DemandOutcome:
        """Store one judged batch of a demand source in one transaction: samples new, duplicate or conflicting
        (quarantined, or with `replace` written over and journaled), its bad records quarantined."""

    # -- retention ----------------------------------------------------------------------
    def prune_raw(self, older_than_ts: int) -> Pruned:
        """Delete the raw samples of whole hours ending at or before `older_than_ts` whose hourly rollup is written;
        never rollups, scores, the journal or bills. A sample sent later for a pruned hour is a duplicate."""


@runtime_checkable
class JournalStore(Protocol):
    """The service's state: decisions journaled before they are acted on, the run set, scores, billed hours."""

    # -- the journal ------------------------------------------------------------------
    def journal_hour(self, hour_ts: int, entries: Sequence[JournalEntry], open_cards: Mapping[str, str],
                     close_cards: Iterable[str], retire_cards: Iterable[str]) -> bool:
        """One hour's decisions with the run-set intervals they open and close and the cards they retire, all or
        nothing; False (nothing written) if the hour is journaled already."""

    def mark_acted_many(self, decision_ids: Sequence[int], ts: int) -> int:
        """A batch of decisions carried out, marked in one transaction; how many were not marked already."""

    def unacted(self, from_id: int = 0) -> list[JournalRow]: ...

    def set_aside(self, entry: JournalEntry) -> bool: ...

    def oldest_unacted_ts(self, kinds: Iterable[str] = ("evict", "release", "add")) -> int | None: ...

    def decisions(
        self, card_key: str | None = None, kinds: Iterable[str] | None = None, since_ts: int | None = None,
        until_ts: int | None = None, limit: int = 10_000, newest_first: bool = False,
    ) -> list[JournalRow]: ...

    def reconcile_open(self) -> list[JournalRow]:
        """The record that saw each reconcile mismatch still open, oldest first."""

    def decision_total(self, card_key: str | None = None, kinds: Iterable[str] | None = None, since_ts: int | None = None) -> int: ...


    def decision_counts(self, since_ts: int, until_ts: int) -> dict[str, tuple[int, int]]: ...

    def last_decided_ts(self, since_ts: int, until_ts: int) -> int | None: ...

    def eviction_hours(self, since_ts: int, until_ts: int) -> list[tuple[int, str]]: ...

    # -- the run set ------------------------------------------------------------------
    def run_set_at(self, hour_ts: int) -> set[str]: ...

    def intervals(self, since_ts: int, until_ts: int) -> list[tuple[str, int, int | None]]: ...

    def retired(self) -> dict[str, int]: ...

    # -- scores -----------------------------------------------------------------------
    def record_scores(self, hour_scores: Sequence[tuple[int, int, Mapping[str, tuple[float, float]]]]) -> None: ...

    def scores_at(self, hour_ts: int, window_hours: int) -> dict[str, float]: ...

    def scores_by_window(self, hour_ts: int) -> dict[int, dict[str, float]]: ...

    def last_scored_ts(self, window_hours: int, since_ts: int, until_ts: int) -> int | None: ...

    # -- billed hours -----------------------------------------------------------------
    def record_hours(self, figs: Sequence[HourFigures], bill_lines: Sequence[Sequence[tuple[str, float, str | None]]]) -> bool: ...

    def hours(self, month_start_ts: int) -> list[HourFigures]: ...

    def last_billed_ts(self, month_start_ts: int | None = None) -> int | None: ...

    def month_start_of(self, hour_ts: int) -> int | None: ...

    def bill_by_part(self, since_ts: int, until_ts: int) -> dict[str, float]: ...


@runtime_checkable
class Leases(Protocol):
    """The store's leases: one conditional write decides who holds each (`fleet.service.lease` elects by it)."""

    def read(self, name: str) -> LeaseRecord | None: ...

    def try_acquire(self, name: str, holder: str, now_ts: float,
                    duration_s: float) -> tuple[bool, LeaseRecord | None, LeaseRecord | None]:
        """Take the lease, or renew it if `holder` has it: (held, the row as it stands, the row as read before)."""

    def release(self, name: str, holder: str, now_ts: float) -> bool: ...


@runtime_checkable
class IdentityRecord(Protocol):
    """What the store holds (a simulation of one preset, or a real pool), recorded once by the first serve."""

    def read(self) -> StoreIdentity | None: ...

    def claim(self, identity: StoreIdentity) -> StoreIdentity:
        """Record `identity` unless the store has one already; returns the one recorded (the first claim's)."""

    def refuse_other(self, wanted: StoreIdentity, writing: str) -> StoreIdentity | None:
        """`StoreError`, nothing written, when the store holds another identity than `wanted`; else what it holds."""


@runtime_checkable
class ReconcileStore(Protocol):
    """Cards by hand and by their telemetry: what the reconcile check and the known run set read, and write."""

    def retire_card(self, card_key: str, ts: int, reason: str, by: str) -> bool: ...

    def last_heard(self) -> dict[str, int | None]: ...

    def still_serving(self, since_ts: int, recent_from_ts: int, warm: AbstractSet[str] = frozenset()
                      ) -> dict[str, tuple[int, int]]:
        """Cards not in `warm` stopped since `since_ts` that served tokens after that and after `recent_from_ts`:
        key -> (when the stop took effect, the last sample with tokens)."""

    def warm_since(self, ts: int) -> dict[str, int]: ...

    def journal_records(self, entries: Iterable[JournalEntry]) -> int: ...

    def records_of_kinds(self, kinds: Iterable[str], since_ts: int | None = None) -> list[JournalRow]: ...

    def last_actions_not_carried_out(self, since_ts: int, until_ts: int) -> dict[str, JournalRow]: ...

    def run_set_actions(self, card_keys: Iterable[str], since_ts: int, until_ts: int
                        ) -> dict[str, list[tuple[JournalRow, bool]]]:
        """Each card's run-set actions in [since_ts, until_ts), oldest first, each with whether it stands (carried
        out or still to be; not set aside nor expired)."""


@runtime_checkable
class Migrations(Protocol):
    """The schema: the revision the database is at, this fleet's, and the upgrade between them."""

    def revision(self) -> str | None: ...

    def head(self) -> str: ...

    def upgrade(self, revision: str = "head") -> str | None: ...


@runtime_checkable
class Store(Protocol):
    """One database in every role (`storage.open.open_store`): the shell reads and writes it only through these."""

    telemetry: TelemetryStore
    journal: JournalStore
    leases: Leases
    identity: IdentityRecord
    reconcile: ReconcileStore
    migrations: Migrations
    shown_url: str  # its URL as it may be printed: the password masked

    def close(self) -> None:
        """Let the database's connections go (a SQLite store's WAL is checkpointed into its file)."""
