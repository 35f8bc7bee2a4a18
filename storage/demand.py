"""Measured demand in the store (revision 0006): its samples written once, and each hour's parts read back.

A pool's demand in an hour is what it served (the hourly rollups' mean tokens/s, summed over its cards) plus what
it did not serve (the `unserved` samples' mean), unless a source measured the whole demand (`offered`). The store
keeps the parts; `fleet.service.demand` says how they make the hour's demand. Plain SQL with bound parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, text

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


def write_demand(engine: Engine, batch: DemandBatch) -> tuple[int, int]:
    """Store a batch of demand samples in one transaction; returns (stored, duplicates): a sample whose (part, ts)
    is stored already is a duplicate and changes nothing."""
    if batch.part not in PARTS:
        raise ValueError(f"demand part {batch.part!r}: expected one of {', '.join(PARTS)}")
    rows = [{"p": batch.part, "t": int(t), "v": float(v)} for t, v in zip(batch.ts.tolist(), batch.demand_tps.tolist())]
    if not rows:
        return 0, 0
    insert = text("INSERT INTO demand_samples (part, ts, demand_tps) VALUES (:p, :t, :v) ON CONFLICT (part, ts) DO NOTHING")
    stored = 0
    with engine.begin() as conn:
        for row in rows:  # rowcount per row: an executemany's total is not reported alike by every driver
            stored += conn.execute(insert, row).rowcount
    return stored, len(rows) - stored


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
