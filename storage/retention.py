"""Retention of raw samples: `telemetry_samples` of whole hours already rolled up, older than a cutoff, go.

Scores, sizing and stored months read the hourly rollups, never the raw samples, so an hour's samples
can go once its rollup is written (the batch that stores a sample adds it to its hour in the same
transaction). Nothing else is deleted: rollups, scores, the journal, run-set intervals, billed hours and
bills stay. Only whole hours go (the cutoff is taken down to its hour), and only samples whose card-hour
has a rollup.

The raw samples were also what told a re-sent sample from a new one. A card-hour whose rollup exists but
whose raw samples are gone is a pruned hour; a sample arriving for one cannot be told from a re-sent
sample, so `pruned_hours` finds them and the batch counts them as duplicates, leaving the hour's rollup
as it stands (never counted twice).

Deletes run card by card with bound parameters, in transactions of `CARDS_PER_TRANSACTION` cards, so a
writer beside it (the service's ingest) waits for a short transaction, not for the whole prune.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import Connection, Engine, text

from storage.values import Pruned
from fleet.core.units import HOUR_S

CARDS_PER_TRANSACTION = 50

_DELETE = text(
    "DELETE FROM telemetry_samples WHERE card_id = :card AND ts < :cut AND EXISTS ("
    "SELECT 1 FROM hourly_rollups r WHERE r.card_id = telemetry_samples.card_id "
    f"AND r.hour_ts = telemetry_samples.ts - telemetry_samples.ts % {HOUR_S})"  # a constant, not a value: no binding
)

_DELETE_SERVING = text("DELETE FROM serving_samples WHERE card_id = :card AND ts < :cut")


def prune_raw(engine: Engine, older_than_ts: int) -> Pruned:
    """Delete the raw samples of whole hours ending at or before `older_than_ts` whose card-hour is rolled up."""
    cut = int(older_than_ts) - int(older_than_ts) % HOUR_S
    with engine.connect() as conn:
        cards = [int(c) for c in conn.execute(
            text("SELECT id FROM cards WHERE EXISTS (SELECT 1 FROM telemetry_samples s WHERE s.card_id = cards.id AND s.ts < :cut) ORDER BY id"),
            {"cut": cut},
        ).scalars()]
    samples = touched = 0
    for i in range(0, len(cards), CARDS_PER_TRANSACTION):
        with engine.begin() as conn:
            for card in cards[i : i + CARDS_PER_TRANSACTION]:
                n = int(conn.execute(_DELETE, {"card": card, "cut": cut}).rowcount)
                conn.execute(_DELETE_SERVING, {"card": card, "cut": cut})  # what was measured beside them goes with them
                samples += n
                touched += n > 0
    return Pruned(samples=samples, cards=touched, before_ts=cut)


def pruned_hours(conn: Connection, mark: str, card_id: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Which of these samples fall in a pruned card-hour: one with a rollup and no raw sample left. A range scan
    of the rollups of the batch's cards over its hours, and for each rollup found one seek into the samples."""
    out = np.zeros(card_id.size, dtype=bool)
    if card_id.size == 0:
        return out
    hour = ts - ts % HOUR_S
    lo, hi = int(hour.min()), int(hour.max())
    found: list[tuple[int, int]] = []
    cards = np.unique(card_id)
    cur = conn.connection.driver_connection.cursor()
    for i in range(0, cards.size, 500):
        ids = [int(c) for c in cards[i : i + 500]]
        cur.execute(
            f"SELECT r.card_id, r.hour_ts FROM hourly_rollups r WHERE r.card_id IN ({', '.join([mark] * len(ids))}) "
            f"AND r.hour_ts >= {mark} AND r.hour_ts <= {mark} AND r.sample_count > 0 AND NOT EXISTS ("
            f"SELECT 1 FROM telemetry_samples s WHERE s.card_id = r.card_id AND s.ts >= r.hour_ts AND s.ts < r.hour_ts + {HOUR_S})",
            tuple(ids + [lo, hi]),
        )
        found.extend(cur.fetchall())
    cur.close()
    if found:
        pairs = np.array(found, dtype=np.int64)
        wanted = pairs[:, 0] * (1 << 32) + pairs[:, 1] // HOUR_S
        out = np.isin(card_id.astype(np.int64) * (1 << 32) + hour // HOUR_S, wanted)
    return out
