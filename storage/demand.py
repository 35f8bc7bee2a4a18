"""Measured demand in the store (revision 0006): its samples written once, and each hour's parts read back.

A sample is keyed by (part, second). A source that sends a stored sample again with the same value sends a
duplicate; with another value, a conflict: quarantined as `conflicting-duplicate` (the stored value stands), or, when
the ingest was asked to `replace`, written over the stored value and journaled (a `demand-correction` record
listing each second's old and new value), so a correction is never silent.

A pool's demand in an hour is what it served (the hourly rollups' mean tokens/s, summed over its cards) plus what
it did not serve (the `unserved` samples' mean), unless a source measured the whole demand (`offered`). The store
keeps the parts; `fleet.service.demand` says how they make the hour's demand. Plain SQL with bound parameters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import pandas as pd
from sqlalchemy import Connection, Engine, text

from storage.values import DemandBatch
from fleet.core.units import HOUR_S

PARTS = ("offered", "unserved")


@dataclass(frozen=True)
class DemandHour:
    """What the store holds of one hour's demand (tokens/s; None: nothing of that part measured)."""

    hour_ts: int
    served_tps: float | None
    unserved_tps: float | None
    offered_tps: float | None


@dataclass(frozen=True)
class DemandConflict:
    """A sample whose (part, second) is stored with another value."""

    record_no: int
    ts: int
    stored_tps: float
    new_tps: float


@dataclass(frozen=True)
class DemandOutcome:
    """What became of one batch of demand records (stored + duplicates + quarantined = read); `replaced` the stored
    samples a `replace` ingest wrote over (counted as stored)."""

    read: int
    stored: int
    duplicates: int
    quarantined: int
    reasons: dict[str, int]
    replaced: tuple[DemandConflict, ...] = ()


def store_demand_rows(conn: Connection, batch: DemandBatch, replace: bool) -> tuple[int, int, list[DemandConflict]]:
    """Store a batch's samples (unique by second within it) in the caller's transaction: (stored, duplicates,
    conflicts). The stored samples of the batch's span are read first; a conflict is written over only with
    `replace`. A sample another writer stored meanwhile counts as a duplicate."""
    if batch.part not in PARTS:
        raise ValueError(f"demand part {batch.part!r}: expected one of {', '.join(PARTS)}")
    if not len(batch):
        return 0, 0, []
    ts, tps, rec = batch.ts.astype(np.int64), batch.demand_tps.astype(np.float64), batch.records
    stored_rows = conn.execute(text("SELECT ts, demand_tps FROM demand_samples WHERE part = :p AND ts >= :lo AND ts <= :hi"),
                               {"p": batch.part, "lo": int(ts.min()), "hi": int(ts.max())}).all()
    have = pd.Series({int(t): float(v) for t, v in stored_rows}, dtype=np.float64)
    old = have.reindex(ts).to_numpy()
    known = ~np.isnan(old)
    differs = known & (old != tps)
    conflicts = [DemandConflict(int(r), int(t), float(o), float(v))
                 for r, t, o, v in zip(rec[differs].tolist(), ts[differs].tolist(), old[differs].tolist(), tps[differs].tolist())]
    insert = text("INSERT INTO demand_samples (part, ts, demand_tps) VALUES (:p, :t, :v) ON CONFLICT (part, ts) DO NOTHING")
    stored = 0
    for t, v in zip(ts[~known].tolist(), tps[~known].tolist()):  # rowcount per row: not every driver totals an executemany
        stored += conn.execute(insert, {"p": batch.part, "t": t, "v": v}).rowcount
    if replace and conflicts:
        conn.execute(text("UPDATE demand_samples SET demand_tps = :v WHERE part = :p AND ts = :t"),
                     [{"p": batch.part, "t": c.ts, "v": c.new_tps} for c in conflicts])
    return stored, len(batch) - stored - len(conflicts), conflicts


JOURNALED_CHANGES = 1_000
"""A correction's record lists at most this many seconds' old and new values (and says how many there were)."""


def journal_replaced(conn: Connection, origin, part: str, replaced: list[DemandConflict], now_ts: int) -> None:
    """One `demand-correction` record in the journal for a batch's replaced samples, in the caller's transaction."""
    from storage.records import DemandCorrectionRecord, Kind

    first = replaced[0]
    record = DemandCorrectionRecord(source=origin.source, part=part, replaced=len(replaced),
                                    changes=[[c.ts, c.stored_tps, c.new_tps] for c in replaced[:JOURNALED_CHANGES]])
    reason = (f"{origin.source}: {len(replaced):,} {part} demand sample{'s' if len(replaced) != 1 else ''} replaced "
              f"(first at {datetime.fromtimestamp(first.ts, timezone.utc):%Y-%m-%dT%H:%M:%SZ}: {first.stored_tps:g} -> "
              f"{first.new_tps:g} tok/s)")
    conn.execute(text("INSERT INTO decisions (ts, kind, card_id, reason, detail_json, decision_key, acted_ts) "
                      "VALUES (:t, :kind, NULL, :r, :d, :key, :t) ON CONFLICT (decision_key) DO NOTHING"),
                 {"t": int(now_ts), "kind": str(Kind.DEMAND_CORRECTION), "r": reason,
                  "d": json.dumps(record.to_detail(), sort_keys=True),
                  "key": f"demand-correction:{origin.run_id}:{origin.part}"})


def last_demand_sample_ts(engine: Engine) -> int | None:
    """The newest second a demand source measured (either part), or None: when the demand source last answered."""
    with engine.connect() as conn:
        got = conn.execute(text("SELECT MAX(ts) FROM demand_samples")).scalar_one()
    return None if got is None else int(got)


def demand_hours(engine: Engine, since_ts: int, until_ts: int) -> dict[int, DemandHour]:
    """Every hour in [since_ts, until_ts) with any part of its demand measured, by hour start."""
    params = {"lo": int(since_ts), "hi": int(until_ts), "h": HOUR_S}
    with engine.connect() as conn:
        served = conn.execute(
            # Along the rollups' (hour, card) key: a few hours of a large pool read those hours' rows only.
            text("SELECT r.hour_ts, SUM(r.tokens_per_s_sum / r.sample_count) FROM hourly_rollups r "
                 "WHERE r.hour_ts >= :lo AND r.hour_ts < :hi AND r.sample_count > 0 "
                 "GROUP BY r.hour_ts"), params).all()
        parts = conn.execute(
            text("SELECT part, (ts / :h) * :h AS hour, AVG(demand_tps) FROM demand_samples "
                 "WHERE ts >= :lo AND ts < :hi GROUP BY part, hour"), params).all()
    got: dict[int, dict[str, float]] = {}
    for hour, tps in served:
        got.setdefault(int(hour), {})["served"] = float(tps)
    for part, hour, tps in parts:
        got.setdefault(int(hour), {})[part] = float(tps)
    return {h: DemandHour(h, v.get("served"), v.get("unserved"), v.get("offered")) for h, v in sorted(got.items())}
