"""The telemetry as the service reads it: the hour's rollup means, measured demand, the pool's size, ingest totals
and quarantined records. `SqlRepository` (the `TelemetryStore`) takes these from `TelemetryReads`, so the journal
store answers only for the journal, and each read is written once, on the engine of the store it reads."""

from __future__ import annotations

import numpy as np
from sqlalchemy import Engine, text

from storage.bulk_rows import placeholder, read_rollup_means
from storage.busy import BUSY_FRACTION_FLOOR
from storage.demand import DemandHour, demand_hours, last_demand_sample_ts
from storage.values import SERVING_COLUMNS


class TelemetryReads:
    """The telemetry store's reads for the service and the operator commands (a mixin over `self.engine`)."""

    engine: Engine

    def rollup_means(self, since_ts: int, until_ts: int, busy_floor: float = BUSY_FRACTION_FLOOR) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(card id, hour ts, measured tok/s) of every hourly rollup in [since_ts, until_ts), as arrays: tokens per
        busy second where the hour's samples carry a busy fraction (`busy_rate_tps`), else the mean tok/s.

        Reads along the rollups' (hour, card) key, a chunk of rows at a time (`storage.bulk_rows`).
        """
        with self.engine.connect() as conn:
            return read_rollup_means(conn, placeholder(self.engine), since_ts, until_ts, busy_floor)

    def serving_samples(self, since_ts: int, until_ts: int) -> dict[str, np.ndarray]:
        """Every serving sample in [since_ts, until_ts) as arrays: `card_id`, `ts` and each of `SERVING_COLUMNS`
        (NaN where its source gave none), what a card's curve is fitted from (`fleet.core.curve_fit`)."""
        cols = ", ".join(SERVING_COLUMNS)
        with self.engine.connect() as conn:
            rows = conn.execute(text(f"SELECT card_id, ts, {cols} FROM serving_samples WHERE ts >= :a AND ts < :b"),
                                {"a": int(since_ts), "b": int(until_ts)}).all()
        got = np.array(rows, dtype=np.float64).reshape(len(rows), 2 + len(SERVING_COLUMNS))  # NULL reads as NaN
        return {"card_id": got[:, 0].astype(np.int64), "ts": got[:, 1].astype(np.int64),
                **{c: got[:, 2 + i] for i, c in enumerate(SERVING_COLUMNS)}}

    def demand_hours(self, since_ts: int, until_ts: int) -> dict[int, DemandHour]:
        """Each hour in [since_ts, until_ts) with a part of its demand measured (`storage.demand`)."""
        return demand_hours(self.engine, since_ts, until_ts)

    def last_demand_sample_ts(self) -> int | None:
        """The newest second a demand source measured, or None (`storage.demand`)."""
        return last_demand_sample_ts(self.engine)

    def card_count(self) -> int:
        """Cards in the pool with a class (what `SqlRepository.cards` lists), without reading them."""
        with self.engine.connect() as conn:
            return int(conn.execute(text("SELECT COUNT(*) FROM cards c JOIN card_classes k ON k.id = c.class_id")).scalar_one())

    def last_rollup_ts(self) -> int | None:
        """The latest hour any telemetry has been rolled up for."""
        with self.engine.connect() as conn:
            got = conn.execute(text("SELECT MAX(hour_ts) FROM hourly_rollups")).scalar()
        return None if got is None else int(got)

    def ingest_totals(self) -> dict[str, int]:
        """Records read, stored, found duplicate and quarantined over every ingest run."""
        with self.engine.connect() as conn:
            r = conn.execute(
                text("SELECT COALESCE(SUM(read), 0), COALESCE(SUM(stored), 0), COALESCE(SUM(duplicates), 0), "
                     "COALESCE(SUM(quarantined), 0) FROM ingest_runs")
            ).one()
        return {"read": int(r[0]), "stored": int(r[1]), "duplicate": int(r[2]), "quarantined": int(r[3])}

    def quarantine_reasons(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            return {r[0]: int(r[1]) for r in conn.execute(text("SELECT reason, COUNT(*) FROM quarantined_input GROUP BY reason")).all()}

    def quarantined(self, reason: str | None = None, source: str | None = None, limit: int = 100) -> tuple[list[dict], int]:
        """Quarantined records by file then line (at most `limit`), and how many match in all, for `fleet quarantine`.

        `reason` matches a reason or its family (`unparseable` matches `unparseable:tokens_per_s`); `source` a file
        as the ingest named it, or by its last parts (`m.csv` matches `drop/m.csv`). Values are bound, and LIKE
        patterns escaped, so a `%` or `_` in a name matches only itself."""
        where, params = [], {"n": int(limit)}
        if reason is not None:
            where.append("(reason = :reason OR reason LIKE :reason_family ESCAPE '\\')")
            params.update(reason=reason, reason_family=_like_literal(reason) + ":%")
        if source is not None:
            where.append("(source = :source OR source LIKE :source_tail ESCAPE '\\')")
            params.update(source=source, source_tail="%/" + _like_literal(source.lstrip("./")))
        cond = " WHERE " + " AND ".join(where) if where else ""
        with self.engine.connect() as conn:
            total = int(conn.execute(text("SELECT COUNT(*) FROM quarantined_input" + cond), params).scalar_one())
            rows = conn.execute(
                text("SELECT source, record_no, reason, raw_text FROM quarantined_input" + cond + " ORDER BY source, record_no, id LIMIT :n"),
                params,
            ).all()
        return [{"source": r[0], "line": int(r[1]), "reason": r[2], "raw_text": r[3]} for r in rows], total

    def card_class(self, card_key: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(
                text("SELECT k.name FROM cards c JOIN card_classes k ON k.id = c.class_id WHERE c.card_key = :k"), {"k": card_key}
            ).scalar()


def _like_literal(text_: str) -> str:
    """`text_` as a LIKE pattern that matches only itself (with ESCAPE '\\')."""
    return text_.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
