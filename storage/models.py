"""The store's tables as SQLAlchemy 2.0 models.

Alembic (alembic/versions) owns the schema; these models must match it, and a
test compares them (autogenerate finds no difference). Times are UTC epoch
seconds in integer columns (`*_ts`), so hour buckets are plain arithmetic and
no driver converts time zones behind our back. The lease's times are the exception:
float epoch seconds, as a lease of a few seconds needs sub-second times.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy import text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

TIMESTAMP = BigInteger().with_variant(Integer(), "sqlite")
"""Epoch seconds: 64-bit everywhere (PostgreSQL's `integer` ends in 2038); SQLite's INTEGER already holds 64 bits."""

# Named constraints so batch-mode migrations on SQLite can find them again.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class CardClass(Base):
    """A class of card: its rated serving rate and rent (either may be unknown for a class registered on first sight)."""

    __tablename__ = "card_classes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    rated_tps: Mapped[float | None] = mapped_column(Float)
    rent_usd_per_month: Mapped[float | None] = mapped_column(Float)


class Card(Base):
    """One rented card, known by the id its telemetry carries (`card_key`)."""

    __tablename__ = "cards"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    card_key: Mapped[str] = mapped_column(String(200), unique=True)
    class_id: Mapped[int] = mapped_column(ForeignKey("card_classes.id"))
    registered_ts: Mapped[int] = mapped_column(TIMESTAMP)
    retired_ts: Mapped[int | None] = mapped_column(TIMESTAMP)
    # Its last telemetry, written by the ingest that stores a newer sample: the reconcile check reads every card's
    # every tick (revision 0008). NULL: never heard from.
    last_heard_ts: Mapped[int | None] = mapped_column(TIMESTAMP)
    # Its last sample with tokens served, kept the same way: the reconcile check asks which stopped cards still serve
    # from the few that served lately, not from every stop the journal holds (revision 0009). NULL: never served.
    last_served_ts: Mapped[int | None] = mapped_column(TIMESTAMP)


class RecordCounts:
    """What became of a stretch of records: read = stored + duplicates + quarantined (a run's, or one batch's)."""

    read: Mapped[int] = mapped_column(Integer, default=0)
    stored: Mapped[int] = mapped_column(Integer, default=0)
    duplicates: Mapped[int] = mapped_column(Integer, default=0)
    quarantined: Mapped[int] = mapped_column(Integer, default=0)


class IngestRun(RecordCounts, Base):
    """One ingest of one source (a file, a pull). `finished_ts` stays NULL until its last batch is in."""

    __tablename__ = "ingest_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(Text)
    source_digest: Mapped[str] = mapped_column(String(64))
    started_ts: Mapped[int] = mapped_column(TIMESTAMP)
    finished_ts: Mapped[int | None] = mapped_column(TIMESTAMP)


class IngestBatch(RecordCounts, Base):
    """One transaction of an ingest: a slice of the source's records and what became of them."""

    __tablename__ = "ingest_batches"
    __table_args__ = (UniqueConstraint("run_id", "part"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("ingest_runs.id"))
    part: Mapped[int] = mapped_column(Integer)
    first_record: Mapped[int] = mapped_column(Integer)
    committed_ts: Mapped[int] = mapped_column(TIMESTAMP)


class TelemetrySample(Base):
    """One measured rate of one card at one second. The key (card_id, ts) stores a re-sent sample once."""

    __tablename__ = "telemetry_samples"
    __table_args__ = {"sqlite_with_rowid": False}

    card_id: Mapped[int] = mapped_column(ForeignKey("cards.id"), primary_key=True)
    ts: Mapped[int] = mapped_column(TIMESTAMP, primary_key=True)
    tokens_per_s: Mapped[float] = mapped_column(Float)
    busy_fraction: Mapped[float | None] = mapped_column(Float)
    batch_id: Mapped[int] = mapped_column(ForeignKey("ingest_batches.id"))


class ServingSample(Base):
    """What a card's serving stack measured beside a stored sample's rate: its mean batch, the mean time per output
    token its streams saw, the mean time to first token and the share of first tokens within the promise's
    (`fleet.core.curve_fit` fits each card's curve from these). A column is NULL where the source gave none; a
    sample with none of them has no row. Keyed as its sample (revision 0010)."""

    __tablename__ = "serving_samples"
    __table_args__ = {"sqlite_with_rowid": False}

    card_id: Mapped[int] = mapped_column(ForeignKey("cards.id"), primary_key=True)
    ts: Mapped[int] = mapped_column(TIMESTAMP, primary_key=True)
    batch_mean: Mapped[float | None] = mapped_column(Float)
    tpot_s: Mapped[float | None] = mapped_column(Float)
    ttft_s: Mapped[float | None] = mapped_column(Float)
    ttft_ok_share: Mapped[float | None] = mapped_column(Float)


class HourlyRollup(Base):
    """Per card and hour: sums and counts of the samples stored so far, kept current by every batch.

    Sums rather than means so a batch can add to an hour without rereading it;
    the repository turns them into means (and tokens per busy second). Keyed by hour first: the score job reads
    one hour of every card (revision 0008); the index by card serves a card's hours.
    """

    __tablename__ = "hourly_rollups"
    __table_args__ = (PrimaryKeyConstraint("hour_ts", "card_id"), Index("ix_hourly_rollups_card_hour", "card_id", "hour_ts"),
                      {"sqlite_with_rowid": False})

    card_id: Mapped[int] = mapped_column(ForeignKey("cards.id"))
    hour_ts: Mapped[int] = mapped_column(TIMESTAMP)
    sample_count: Mapped[int] = mapped_column(Integer)
    tokens_per_s_sum: Mapped[float] = mapped_column(Float)
    busy_count: Mapped[int] = mapped_column(Integer)
    busy_fraction_sum: Mapped[float] = mapped_column(Float)
    busy_tokens_per_s_sum: Mapped[float] = mapped_column(Float)


class Score(Base):
    """A card's windowed rate at an hour, and its tokens per dollar. Keyed by hour first: an hour's rows are written
    together and read together (revision 0007)."""

    __tablename__ = "scores"
    __table_args__ = (PrimaryKeyConstraint("hour_ts", "window_hours", "card_id"), {"sqlite_with_rowid": False})

    card_id: Mapped[int] = mapped_column(ForeignKey("cards.id"))
    hour_ts: Mapped[int] = mapped_column(TIMESTAMP)
    window_hours: Mapped[int] = mapped_column(Integer)
    score_tps: Mapped[float] = mapped_column(Float)
    tokens_per_usd: Mapped[float] = mapped_column(Float)


class RunSetInterval(Base):
    """A stretch during which a card was in the run set (warm); `end_ts` NULL while it still is."""

    __tablename__ = "run_set_intervals"
    # The second index answers "open at t" from the open intervals and those ending after t (revision 0008).
    __table_args__ = (Index("ix_run_set_intervals_card_start", "card_id", "start_ts"),
                      Index("ix_run_set_intervals_open", "end_ts", "card_id", "start_ts"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    card_id: Mapped[int] = mapped_column(ForeignKey("cards.id"))
    start_ts: Mapped[int] = mapped_column(TIMESTAMP)
    end_ts: Mapped[int | None] = mapped_column(TIMESTAMP)
    reason: Mapped[str] = mapped_column(Text, default="")


class Decision(Base):
    """The decision journal: what the autoscaler decided, about which card, and why.

    `decision_key` makes journaling idempotent; `acted_ts` stays NULL until the
    actuator carried the decision out (revision 0003).
    """

    __tablename__ = "decisions"
    __table_args__ = (
        Index("ix_decisions_ts", "ts"),
        Index("ix_decisions_card_ts", "card_id", "ts"),
        # Reads by kind (retired cards, set-aside actions, reconcile records): a few rows, not the journal (revision 0009).
        Index("ix_decisions_kind_ts", "kind", "ts"),
        # The acting pass's question, answered from the few not acted on (revision 0007).
        Index("ix_decisions_unacted", "id", sqlite_where=text("acted_ts IS NULL"), postgresql_where=text("acted_ts IS NULL")),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ts: Mapped[int] = mapped_column(TIMESTAMP)
    kind: Mapped[str] = mapped_column(String(40))
    card_id: Mapped[int | None] = mapped_column(ForeignKey("cards.id"))
    reason: Mapped[str] = mapped_column(Text, default="")
    detail_json: Mapped[str] = mapped_column(Text, default="{}")
    decision_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    acted_ts: Mapped[int | None] = mapped_column(TIMESTAMP)


class ReconcileOpen(Base):
    """Each reconcile mismatch seen and not cleared since: its card, its kind and the record that saw it.

    Kept by the one writer of reconcile records (`storage.cards.journal_records`), in the same transaction, so the
    open mismatches are a read of these few rows, not a fold over every reconcile record the journal ever held,
    which every tick, `/metrics` and `fleet status` did (revision 0009).
    """

    __tablename__ = "reconcile_open"

    card_id: Mapped[int] = mapped_column(ForeignKey("cards.id"), primary_key=True)
    mismatch: Mapped[str] = mapped_column(String(40), primary_key=True)
    decision_id: Mapped[int] = mapped_column(ForeignKey("decisions.id"))


class ServiceHour(Base):
    """One decided and billed month hour of the service: demand, capacity, the bill's parts, idle and ideal (revision 0003)."""

    __tablename__ = "service_hours"
    __table_args__ = (Index("ix_service_hours_month", "month_start_ts"),)

    hour_ts: Mapped[int] = mapped_column(TIMESTAMP, primary_key=True, autoincrement=False)
    month_start_ts: Mapped[int] = mapped_column(TIMESTAMP)
    demand_tps: Mapped[float] = mapped_column(Float)
    capacity_tps: Mapped[float] = mapped_column(Float)
    delivered_tps: Mapped[float] = mapped_column(Float)
    scored_capacity_tps: Mapped[float] = mapped_column(Float)
    cards_warm: Mapped[int] = mapped_column(Integer)
    warm_usd: Mapped[float] = mapped_column(Float)
    churn_usd: Mapped[float] = mapped_column(Float)
    idle_usd: Mapped[float] = mapped_column(Float)
    ideal_usd: Mapped[float] = mapped_column(Float)
    evictions: Mapped[int] = mapped_column(Integer)
    wrong_evictions: Mapped[int] = mapped_column(Integer)
    demand_measured_tps: Mapped[float | None] = mapped_column(Float)  # NULL: no demand was measured (revision 0006)
    goodput_tps: Mapped[float | None] = mapped_column(Float)  # under a promise, tokens/s within it; NULL: none (revision 0011)


class DemandSample(Base):
    """A measured demand sample (revision 0006): `offered` is the whole demand (a gateway's counter, a demand file),
    `unserved` the part the pool did not serve (its queue's growth); the key stores a re-sent sample once."""

    __tablename__ = "demand_samples"
    __table_args__ = {"sqlite_with_rowid": False}

    part: Mapped[str] = mapped_column(String(20), primary_key=True)
    ts: Mapped[int] = mapped_column(TIMESTAMP, primary_key=True, autoincrement=False)
    demand_tps: Mapped[float] = mapped_column(Float)


class Bill(Base):
    """One line of the bill: rent for warm hours or a churn fee, for a card over a period."""

    __tablename__ = "bills"
    __table_args__ = (Index("ix_bills_period", "period_start_ts"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    card_id: Mapped[int | None] = mapped_column(ForeignKey("cards.id"))
    period_start_ts: Mapped[int] = mapped_column(TIMESTAMP)
    period_end_ts: Mapped[int] = mapped_column(TIMESTAMP)
    kind: Mapped[str] = mapped_column(String(20))
    usd: Mapped[float] = mapped_column(Float)


class QuarantinedInput(Base):
    """A record that was not stored: its raw text, why, and where it came from.

    Unique per (source digest, record number), so sending the same bad file twice
    quarantines each bad record once.
    """

    __tablename__ = "quarantined_input"
    __table_args__ = (
        UniqueConstraint("source_digest", "record_no"),
        Index("ix_quarantined_input_reason", "reason"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    batch_id: Mapped[int] = mapped_column(ForeignKey("ingest_batches.id"))
    source: Mapped[str] = mapped_column(Text)
    source_digest: Mapped[str] = mapped_column(String(64))
    record_no: Mapped[int] = mapped_column(Integer)
    raw_text: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(String(80))


class Lease(Base):
    """One leader per store: who holds the lease `name`, since when, until when, and its epoch (revision 0005).

    The epoch goes up by one each time a new holder takes the lease and stays while its holder renews it, so it
    orders leaders: an action carries it and a receiver can refuse one from an older epoch (a fencing token).
    Times are float epoch seconds of the holders' clocks.
    """

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    epoch: Mapped[int] = mapped_column(Integer)
    acquired_ts: Mapped[float] = mapped_column(Float)
    renewed_ts: Mapped[float] = mapped_column(Float)
    expires_ts: Mapped[float] = mapped_column(Float)


class StoreMeta(Base):
    """Facts about the store itself, by key: `identity` is what it holds (a simulation of which preset, or a real
    pool), recorded at the first `fleet serve` (revision 0005)."""

    __tablename__ = "store_meta"

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
