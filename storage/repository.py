"""The telemetry store on SQLAlchemy: `SqlRepository`, the implementation of `storage.interfaces.TelemetryStore`.

Nothing outside `storage/` writes SQL. `SqlRepository` works on any SQLAlchemy
URL (tested on SQLite and PostgreSQL); `sqlite_memory_repository()` is the same class on a
private SQLite database in memory (not a separate twin: the SQL it runs is the
SQL of a file store). The values it takes and returns live in `storage.values`
and are importable from here too.

Bulk writes go through the driver's executemany with bound parameters, in key
order, `ON CONFLICT DO NOTHING` on the (card_id, ts) key; on PostgreSQL the
samples go by `COPY` into a staging table and from there in one `INSERT ...
SELECT ... ON CONFLICT DO NOTHING` (`storage.copy`). When every sample was
new (the common case) the batch's hourly rollups are summed in pandas and
upserted, a few rows per card; only when some were already stored does the
batch read back its time span to tell duplicates from conflicts. A sample for a
card-hour whose raw samples were pruned (`storage.retention`) is a duplicate.
"""

from __future__ import annotations

import json
from typing import Callable, Iterable, Mapping

import numpy as np
import pandas as pd
from sqlalchemy import Connection, Engine, text

from storage.db import DEFAULT_URL, ensure_schema, make_engine
from storage.interfaces import TelemetryStore
from storage.copy import copy_samples
from storage.busy import BUSY_FRACTION_FLOOR, busy_rate_tps
from storage.retention import prune_raw, pruned_hours
from storage.bulk_rows import placeholder
from storage.telemetry_reads import TelemetryReads
from storage.demand import DemandOutcome, journal_replaced, store_demand_rows
from storage.values import SERVING_COLUMNS, BatchOrigin, BatchOutcome, CardInfo, ClassSpec, DemandBatch, Pruned, Rejected, SampleBatch
from fleet.core.units import HOUR_S, NO_END_TS

__all__ = [
    "BatchOutcome", "CardInfo", "ClassSpec", "Rejected", "SampleBatch", "SqlRepository", "TelemetryStore",
    "open_repository", "sqlite_memory_repository",
]




def open_repository(url: str = DEFAULT_URL) -> "SqlRepository":
    """The repository at `url`; a new, empty database is given the schema, an old one must be upgraded first."""
    engine = make_engine(url)
    ensure_schema(engine, url)
    return SqlRepository(engine)


def sqlite_memory_repository() -> "SqlRepository":
    """`SqlRepository` on a private SQLite database in memory, with the full schema: the same code and SQL
    as a file store, gone when the last reference is (for tests and one-off replays)."""
    return open_repository("sqlite://")




class SqlRepository(TelemetryReads):
    """`TelemetryStore` on SQLAlchemy Core: plain SQL with bound parameters, one transaction per call."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._mark = placeholder(engine)

    def _values(self, n: int) -> str:
        return "(" + ", ".join([self._mark] * n) + ")"

    # -- pool ---------------------------------------------------------------
    def declare_classes(self, classes: Iterable[ClassSpec]) -> None:
        """Add classes, or update the rated rate and rent of classes already known."""
        rows = [{"name": c.name, "rated": c.rated_tps, "rent": c.rent_usd_per_month} for c in classes]
        if not rows:
            return
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO card_classes (name, rated_tps, rent_usd_per_month) VALUES (:name, :rated, :rent) "
                    "ON CONFLICT (name) DO UPDATE SET rated_tps = excluded.rated_tps, rent_usd_per_month = excluded.rent_usd_per_month"
                ),
                rows,
            )

    def declare_cards(self, cards: Mapping[str, str], now_ts: int) -> None:
        """Add cards (card key → class name); a class not yet known is added with unknown rates."""
        if not cards:
            return
        with self.engine.begin() as conn:
            self._register(conn, cards, now_ts)

    def _register(self, conn: Connection, cards: Mapping[str, str], now_ts: int) -> None:
        names = sorted(set(cards.values()))
        conn.execute(text("INSERT INTO card_classes (name) VALUES (:name) ON CONFLICT (name) DO NOTHING"), [{"name": n} for n in names])
        ids = dict(conn.execute(text("SELECT name, id FROM card_classes")).all())
        conn.execute(
            text("INSERT INTO cards (card_key, class_id, registered_ts) VALUES (:k, :c, :t) ON CONFLICT (card_key) DO NOTHING"),
            [{"k": k, "c": ids[v], "t": now_ts} for k, v in cards.items()],
        )

    def classes(self) -> dict[str, ClassSpec]:
        with self.engine.connect() as conn:
            rows = conn.execute(text("SELECT name, rated_tps, rent_usd_per_month FROM card_classes ORDER BY id")).all()
        return {r[0]: ClassSpec(r[0], r[1], r[2]) for r in rows}

    def cards(self) -> dict[str, CardInfo]:
        with self.engine.connect() as conn:
            return self._cards(conn)

    @staticmethod
    def _card_ids(conn: Connection) -> dict[str, int]:
        return {k: int(i) for i, k in conn.exec_driver_sql("SELECT id, card_key FROM cards").all()}

    @staticmethod
    def _cards(conn: Connection, keys: Iterable[str] | None = None) -> dict[str, CardInfo]:
        sql = "SELECT c.id, c.card_key, k.name, k.rated_tps FROM cards c JOIN card_classes k ON k.id = c.class_id"
        if keys is None:
            rows = conn.execute(text(sql + " ORDER BY c.id")).all()
        else:
            wanted = set(keys)
            rows = [r for r in conn.execute(text(sql)).all() if r[1] in wanted]
        return {r[1]: CardInfo(r[0], r[1], r[2], r[3]) for r in rows}

    # -- ingest -------------------------------------------------------------
    def begin_run(self, source: str, source_digest: str, now_ts: int) -> int:
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    text(
                        "INSERT INTO ingest_runs (source, source_digest, started_ts, read, stored, duplicates, quarantined) "
                        "VALUES (:s, :d, :t, 0, 0, 0, 0) RETURNING id"
                    ),
                    {"s": source, "d": source_digest, "t": now_ts},
                ).scalar_one()
            )

    def finish_run(self, run_id: int, now_ts: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(text("UPDATE ingest_runs SET finished_ts = :t WHERE id = :r"), {"t": now_ts, "r": run_id})

    def write_batch(
        self,
        origin: BatchOrigin,
        samples: SampleBatch,
        rejected: Rejected,
        register: Mapping[str, str],
        now_ts: int,
        raw_text_of: Callable[[list[int]], list[str]] | None = None,
        duplicates_in_batch: int = 0,
    ) -> BatchOutcome:
        """Store one batch in one transaction: register new cards, store new samples, quarantine the rest, update rollups.

        A re-sent sample with the same values is a duplicate; one whose values
        differ from the stored sample is quarantined as `conflicting-duplicate`
        (the stored value stands). Samples must be unique by (card, ts) within the batch;
        `duplicates_in_batch` counts the repeats the caller already took out.
        """
        n = len(samples)
        q_no, q_raw, q_reason = list(rejected.record_no), list(rejected.raw_text), list(rejected.reason)
        with self.engine.begin() as conn:
            batch_id = self._open_batch(conn, origin, now_ts)
            registered: tuple[CardInfo, ...] = ()
            if register:
                self._register(conn, register, now_ts)
                registered = tuple(self._cards(conn, register.keys()).values())
            stored = conflicts = 0
            if n:
                codes, keys = pd.factorize(pd.Series(samples.card_key, dtype=object))
                directory = self._card_ids(conn)
                card_id = np.array([directory[k] for k in keys], dtype=np.int64)[codes]
                stored, conflict_records = self._store_samples(conn, batch_id, card_id, samples)
                conflicts = len(conflict_records)
                if conflicts:
                    raw = raw_text_of(conflict_records) if raw_text_of else _sample_text(samples, conflict_records)
                    q_no.extend(conflict_records)
                    q_raw.extend(raw)
                    q_reason.extend(["conflicting-duplicate"] * conflicts)
            outcome = self._close_batch(conn, origin, batch_id, Rejected(q_no, q_raw, q_reason), n + len(rejected) + duplicates_in_batch,
                                        stored, n - stored - conflicts + duplicates_in_batch)
        return BatchOutcome(*outcome, registered)

    @staticmethod
    def _open_batch(conn: Connection, origin: BatchOrigin, now_ts: int) -> int:
        """A batch's row in `ingest_batches` (its counts filled in by `_close_batch`, in the same transaction)."""
        return int(conn.execute(
            text("INSERT INTO ingest_batches (run_id, part, first_record, read, stored, duplicates, quarantined, committed_ts) "
                 "VALUES (:r, :p, :f, 0, 0, 0, 0, :t) RETURNING id"),
            {"r": origin.run_id, "p": origin.part, "f": origin.first_record, "t": now_ts},
        ).scalar_one())

    def _close_batch(self, conn: Connection, origin: BatchOrigin, batch_id: int, quarantine: Rejected, read: int, stored: int,
                     duplicates: int) -> tuple[int, int, int, int, dict[str, int]]:
        """Quarantine a batch's bad records (once per source digest and record) and add its counts to its batch and
        run; returns (read, stored, duplicates, quarantined, reasons)."""
        reasons: dict[str, int] = {}
        if len(quarantine):
            cur = conn.connection.driver_connection.cursor()
            cur.executemany(
                "INSERT INTO quarantined_input (batch_id, source, source_digest, record_no, raw_text, reason) "
                f"VALUES {self._values(6)} ON CONFLICT (source_digest, record_no) DO NOTHING",
                [(batch_id, origin.source, origin.source_digest, int(r), t, why)
                 for r, t, why in zip(quarantine.record_no, quarantine.raw_text, quarantine.reason)],
            )
            cur.close()
            for why in quarantine.reason:
                reasons[why] = reasons.get(why, 0) + 1
        counts = {"read": read, "stored": stored, "dup": duplicates, "q": len(quarantine)}
        conn.execute(text("UPDATE ingest_batches SET read = :read, stored = :stored, duplicates = :dup, quarantined = :q WHERE id = :b"),
                     {**counts, "b": batch_id})
        conn.execute(text("UPDATE ingest_runs SET read = read + :read, stored = stored + :stored, "
                          "duplicates = duplicates + :dup, quarantined = quarantined + :q WHERE id = :r"),
                     {**counts, "r": origin.run_id})
        return read, stored, duplicates, len(quarantine), reasons

    def _store_samples(self, conn: Connection, batch_id: int, card_id: np.ndarray, s: SampleBatch) -> tuple[int, list[int]]:
        """Insert in key order (the B-tree takes them in sequence); find what was new only when some were not.
        Samples of pruned card-hours are left out: they count as duplicates, and their hours' rollups stand."""
        pruned = pruned_hours(conn, self._mark, card_id, s.ts)
        if pruned.any():
            keep = ~pruned
            card_id = card_id[keep]
            s = s.take(keep)
            if not len(s):
                return 0, []
        order = np.lexsort((s.ts, card_id))
        cid, ts, tps, busy, rec = card_id[order], s.ts[order], s.tokens_per_s[order], s.busy_fraction[order], s.record_no[order]
        has_busy = ~np.isnan(busy)
        if conn.dialect.name == "postgresql":
            stored = copy_samples(conn, batch_id, cid, ts, tps, busy)
        else:
            busy_obj = busy.astype(object)
            busy_obj[~has_busy] = None
            stored = self._bulk_insert(
                conn,
                "INSERT INTO telemetry_samples (card_id, ts, tokens_per_s, busy_fraction, batch_id) VALUES ",
                " ON CONFLICT (card_id, ts) DO NOTHING",
                [cid.tolist(), ts.tolist(), tps.tolist(), busy_obj.tolist(), batch_id],
            )
        new = np.ones(cid.size, dtype=bool)
        conflicts: list[int] = []
        if stored < cid.size:
            got = self._samples_near(conn, cid, ts)
            mine = pd.DataFrame({"card_id": cid, "ts": ts, "tps": tps, "busy": busy})
            both = mine.merge(got, on=["card_id", "ts"], how="left", validate="one_to_one")
            new = (both["batch_id"] == batch_id).to_numpy()
            differs = (both["tps"] != both["s_tps"]) | (both["busy"].isna() != both["s_busy"].isna()) | (
                both["busy"].notna() & (both["busy"] != both["s_busy"])
            )
            conflicts = sorted(rec[(~new) & differs.to_numpy()].tolist())
        if stored:
            self._add_rollups(conn, cid[new], ts[new], tps[new], busy[new])
            if s.serving:
                self._store_serving(conn, cid[new], ts[new], {c: v[order][new] for c, v in s.serving.items()})
        return stored, conflicts

    def _store_serving(self, conn: Connection, cid: np.ndarray, ts: np.ndarray, serving: Mapping[str, np.ndarray]) -> None:
        """The serving columns of newly stored samples, a row for each that carried any (NULL for those it did not)."""
        cols = [c for c in SERVING_COLUMNS if c in serving]
        given = np.zeros(cid.size, dtype=bool)
        values = []
        for c in cols:
            v = np.asarray(serving[c], dtype=np.float64)
            has = np.isfinite(v)
            given |= has
            obj = v.astype(object)
            obj[~has] = None
            values.append(obj)
        if not given.any():
            return
        self._bulk_insert(conn, f"INSERT INTO serving_samples (card_id, ts, {', '.join(cols)}) VALUES ",
                          " ON CONFLICT (card_id, ts) DO NOTHING",
                          [cid[given].tolist(), ts[given].tolist(), *[v[given].tolist() for v in values]])

    def _bulk_insert(self, conn: Connection, head: str, tail: str, columns: list, rows_per_statement: int = 200) -> int:
        """executemany of multi-row VALUES statements (bound parameters, `rows_per_statement` rows each): a third of the
        per-row cost of one statement per row. A column given as a scalar repeats it. Returns the rows changed."""
        n = next(len(c) for c in columns if isinstance(c, list))
        table = np.empty((n, len(columns)), dtype=object)
        for j, c in enumerate(columns):
            table[:, j] = c
        one = self._values(len(columns))
        whole = n // rows_per_statement * rows_per_statement
        cur = conn.connection.driver_connection.cursor()
        changed = 0
        if whole:
            cur.executemany(head + ", ".join([one] * rows_per_statement) + tail, table[:whole].reshape(-1, rows_per_statement * len(columns)).tolist())
            changed += int(cur.rowcount)
        if whole < n:
            cur.executemany(head + one + tail, table[whole:].tolist())
            changed += int(cur.rowcount)
        cur.close()
        return changed

    def _samples_near(self, conn: Connection, cid: np.ndarray, ts: np.ndarray) -> pd.DataFrame:
        """Stored samples of these cards in the batch's time span (a range scan of the key per card)."""
        lo, hi = int(ts.min()), int(ts.max())
        frames = []
        cards = pd.unique(cid)
        for i in range(0, cards.size, 500):
            ids = [int(c) for c in cards[i : i + 500]]
            marks = ", ".join([self._mark] * len(ids))
            cur = conn.connection.driver_connection.cursor()
            cur.execute(
                f"SELECT card_id, ts, tokens_per_s, busy_fraction, batch_id FROM telemetry_samples "
                f"WHERE card_id IN ({marks}) AND ts >= {self._mark} AND ts <= {self._mark}",
                tuple(ids + [lo, hi]),
            )
            frames.append(pd.DataFrame.from_records(cur.fetchall(), columns=["card_id", "ts", "s_tps", "s_busy", "batch_id"]))
            cur.close()
        got = pd.concat(frames, ignore_index=True)
        got["s_busy"] = pd.to_numeric(got["s_busy"], errors="coerce").astype(float)
        return got

    def _add_rollups(self, conn: Connection, cid: np.ndarray, ts: np.ndarray, tps: np.ndarray, busy: np.ndarray) -> None:
        """Add newly stored samples to their hours: a few rows per card, upserted."""
        has_busy = ~np.isnan(busy)
        f = pd.DataFrame(
            {
                "card_id": cid,
                "hour_ts": ts - ts % HOUR_S,
                "n": np.ones(cid.size, dtype=np.int64),
                "tps": tps,
                "busy_n": has_busy.astype(np.int64),
                "busy": np.where(has_busy, busy, 0.0),
                "busy_tps": np.where(has_busy, tps, 0.0),
            }
        )
        g = f.groupby(["card_id", "hour_ts"], sort=False).sum().reset_index()
        cur = conn.connection.driver_connection.cursor()
        cur.executemany(
            "INSERT INTO hourly_rollups (card_id, hour_ts, sample_count, tokens_per_s_sum, busy_count, busy_fraction_sum, busy_tokens_per_s_sum) "
            f"VALUES {self._values(7)} ON CONFLICT (hour_ts, card_id) DO UPDATE SET "
            "sample_count = hourly_rollups.sample_count + excluded.sample_count, "
            "tokens_per_s_sum = hourly_rollups.tokens_per_s_sum + excluded.tokens_per_s_sum, "
            "busy_count = hourly_rollups.busy_count + excluded.busy_count, "
            "busy_fraction_sum = hourly_rollups.busy_fraction_sum + excluded.busy_fraction_sum, "
            "busy_tokens_per_s_sum = hourly_rollups.busy_tokens_per_s_sum + excluded.busy_tokens_per_s_sum",
            zip(*(g[c].tolist() for c in ["card_id", "hour_ts", "n", "tps", "busy_n", "busy", "busy_tps"])),
        )
        # Each card's last telemetry, and its last with tokens served, as the reconcile check reads them (a later
        # sample already stored stands). A card that served in the batch has both moved in one statement.
        last = pd.Series(ts).groupby(cid, sort=False).max()
        served = pd.Series(ts[tps > 0]).groupby(cid[tps > 0], sort=False).max()
        m = self._mark
        heard_only = last.index.difference(served.index, sort=False)
        if heard_only.size:
            cur.executemany(
                f"UPDATE cards SET last_heard_ts = {m} WHERE id = {m} AND (last_heard_ts IS NULL OR last_heard_ts < {m})",
                [(t, c, t) for c, t in zip(heard_only.tolist(), last[heard_only].tolist())],
            )
        if served.size:
            cur.executemany(
                f"UPDATE cards SET last_heard_ts = CASE WHEN last_heard_ts IS NULL OR last_heard_ts < {m} THEN {m} "
                f"ELSE last_heard_ts END, last_served_ts = CASE WHEN last_served_ts IS NULL OR last_served_ts < {m} "
                f"THEN {m} ELSE last_served_ts END WHERE id = {m} AND (last_heard_ts IS NULL OR last_heard_ts < {m} "
                f"OR last_served_ts IS NULL OR last_served_ts < {m})",
                [(h, h, s, s, c, h, s) for c, h, s in zip(served.index.tolist(), last[served.index].tolist(), served.tolist())],
            )
        cur.close()

    # -- reading --------------------------------------------------------------
    def sample_count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(text("SELECT COUNT(*) FROM telemetry_samples")).scalar_one())

    # -- retention ------------------------------------------------------------------
    def write_demand_batch(self, origin: BatchOrigin, batch: DemandBatch, rejected: Rejected, now_ts: int,
                           raw_text_of: Callable[[list[int]], list[str]], duplicates_in_batch: int = 0,
                           replace: bool = False) -> DemandOutcome:
        """One batch of a demand source in one transaction, as `write_batch` stores telemetry: new samples stored,
        the same value again a duplicate, the bad records quarantined; a new value for a stored (part, second) is
        quarantined as `conflicting-duplicate`, or with `replace` written over the stored one and journaled
        (`storage.demand.store_demand_rows`)."""
        with self.engine.begin() as conn:
            batch_id = self._open_batch(conn, origin, now_ts)
            stored, duplicates, conflicts = store_demand_rows(conn, batch, replace)
            quarantine = Rejected(list(rejected.record_no), list(rejected.raw_text), list(rejected.reason))
            if conflicts and not replace:
                nos = [c.record_no for c in conflicts]
                quarantine.record_no.extend(nos)
                quarantine.raw_text.extend(raw_text_of(nos))
                quarantine.reason.extend(["conflicting-duplicate"] * len(nos))
            if conflicts and replace:
                journal_replaced(conn, origin, batch.part, conflicts, now_ts)
            outcome = self._close_batch(conn, origin, batch_id, quarantine, len(batch) + len(rejected) + duplicates_in_batch,
                                        stored + (len(conflicts) if replace else 0), duplicates + duplicates_in_batch)
        return DemandOutcome(*outcome, replaced=tuple(conflicts) if replace else ())

    def prune_raw(self, older_than_ts: int) -> Pruned:
        """Delete the raw samples of whole hours ending at or before `older_than_ts` whose hourly rollup is written;
        never rollups, scores, the journal or bills. A sample sent later for a pruned hour is a duplicate."""
        return prune_raw(self.engine, older_than_ts)

    def hourly_rollups(self, start_ts: int | None = None, end_ts: int | None = None,
                       busy_floor: float = BUSY_FRACTION_FLOOR) -> pd.DataFrame:
        """Hourly rollups in [start_ts, end_ts): card_key, card_class, hour_ts, sample_count, mean_tps,
        busy_fraction (mean, NaN without busy data) and busy_tps (tokens per busy second, NaN without busy data)."""
        lo = -NO_END_TS if start_ts is None else int(start_ts)
        hi = NO_END_TS if end_ts is None else int(end_ts)
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.card_key, k.name, r.hour_ts, r.sample_count, r.tokens_per_s_sum, r.busy_count, "
                    "r.busy_fraction_sum, r.busy_tokens_per_s_sum FROM hourly_rollups r "
                    "JOIN cards c ON c.id = r.card_id JOIN card_classes k ON k.id = c.class_id "
                    "WHERE r.hour_ts >= :lo AND r.hour_ts < :hi ORDER BY c.card_key, r.hour_ts"
                ),
                {"lo": lo, "hi": hi},
            ).all()
        # Plain tuples: pandas probes each row's attributes, and a SQLAlchemy Row answers a missing one
        # by raising an exception inside, and a week of a large pool is millions of rows.
        f = pd.DataFrame(
            [tuple(r) for r in rows],
            columns=["card_key", "card_class", "hour_ts", "sample_count", "tps_sum", "busy_count", "busy_sum", "busy_tps_sum"],
        )
        out = f[["card_key", "card_class", "hour_ts", "sample_count"]].copy()
        out["mean_tps"] = f["tps_sum"].astype(float) / f["sample_count"].astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            busy_n = f["busy_count"].astype(float).to_numpy()
            busy_sum = f["busy_sum"].astype(float).to_numpy()
            out["busy_fraction"] = np.where(busy_n > 0, busy_sum / busy_n, np.nan)
            out["busy_tps"] = busy_rate_tps(busy_sum, busy_n, f["busy_tps_sum"].astype(float).to_numpy(), busy_floor)
        return out

def _sample_text(s: SampleBatch, record_nos: list[int]) -> list[str]:
    """The raw text of samples that turned out bad only at the store (conflicts), rebuilt from their parsed values."""
    pos = {int(r): i for i, r in enumerate(s.record_no.tolist())}
    out = []
    for r in record_nos:
        i = pos[r]
        busy = None if np.isnan(s.busy_fraction[i]) else float(s.busy_fraction[i])
        out.append(json.dumps({"card_id": s.card_key[i], "ts": int(s.ts[i]), "tokens_per_s": float(s.tokens_per_s[i]), "busy_fraction": busy}))
    return out
