"""Cards by hand and by their telemetry: an operator's retirement, and when each card was last heard from.

`retire_card` is the one write: the `retire` record (keyed `retire:CARD`, so a
card is retired once), the card's `retired_ts`, and the end of its run-set
interval, in one transaction. The reads give the reconcile check (`fleet.service.
reconcile`) each card's last telemetry and last tokens served, through the
samples' primary key (card, ts), one card at a time: no scan of the samples.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping

from sqlalchemy import Engine, text

RETIRE_KIND = "retire"


class UnknownCard(KeyError):
    """No card of that key in the store."""


def retire_card(engine: Engine, card_key: str, ts: int, reason: str, by: str) -> bool:
    """Retire `card_key` by hand at `ts`: it leaves the run set and the pool for good. False if it was retired by
    hand already (nothing written); `UnknownCard` if the store has no such card."""
    with engine.begin() as conn:
        card_id = conn.execute(text("SELECT id FROM cards WHERE card_key = :k"), {"k": card_key}).scalar()
        if card_id is None:
            raise UnknownCard(card_key)
        added = conn.execute(
            text("INSERT INTO decisions (ts, kind, card_id, reason, detail_json, decision_key, acted_ts) "
                 "VALUES (:t, :kind, :c, :r, :d, :key, :t) ON CONFLICT (decision_key) DO NOTHING"),
            {"t": int(ts), "kind": RETIRE_KIND, "c": card_id, "r": f"retired by hand by {by}: {reason}",
             "d": json.dumps({"by": by, "reason": reason}, sort_keys=True), "key": f"{RETIRE_KIND}:{card_key}"},
        ).rowcount == 1
        if not added:
            return False
        conn.execute(text("UPDATE cards SET retired_ts = :t WHERE id = :c"), {"t": int(ts), "c": card_id})
        conn.execute(text("UPDATE run_set_intervals SET end_ts = :t WHERE card_id = :c AND end_ts IS NULL"),
                     {"t": int(ts), "c": card_id})
    return True


def last_heard(engine: Engine, cards: Iterable[str]) -> dict[str, int | None]:
    """Card key -> the time of its last telemetry (a sample, or the end of its last rolled-up hour where the raw
    samples were pruned), None if it never sent any."""
    out: dict[str, int | None] = {}
    with engine.connect() as conn:
        for key in sorted(set(cards)):
            row = conn.execute(
                text("SELECT (SELECT MAX(s.ts) FROM telemetry_samples s WHERE s.card_id = c.id), "
                     "(SELECT MAX(r.hour_ts) FROM hourly_rollups r WHERE r.card_id = c.id AND r.sample_count > 0) "
                     "FROM cards c WHERE c.card_key = :k"),
                {"k": key},
            ).first()
            if row is None:
                continue
            sample, hour = row
            if sample is not None:
                out[key] = int(sample)
            else:  # pruned, or never sent: a rolled-up hour says no more than "within this hour"
                out[key] = None if hour is None else int(hour) + 3599
    return out


def last_served_after(engine: Engine, after_ts: Mapping[str, int]) -> dict[str, int]:
    """Card key -> its last sample with tokens served after the time given for it (cards with none are left out)."""
    out: dict[str, int] = {}
    with engine.connect() as conn:
        for key, ts in sorted(after_ts.items()):
            got = conn.execute(
                text("SELECT MAX(s.ts) FROM telemetry_samples s JOIN cards c ON c.id = s.card_id "
                     "WHERE c.card_key = :k AND s.ts > :t AND s.tokens_per_s > 0"),
                {"k": key, "t": int(ts)},
            ).scalar()
            if got is not None:
                out[key] = int(got)
    return out


def warm_since(engine: Engine, ts: int) -> dict[str, int]:
    """Card key -> the start of its run-set interval open at `ts`, for every card warm then."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT c.card_key, MAX(r.start_ts) FROM run_set_intervals r JOIN cards c ON c.id = r.card_id "
                 "WHERE r.start_ts <= :t AND (r.end_ts IS NULL OR r.end_ts > :t) GROUP BY c.card_key"),
            {"t": int(ts)},
        ).all()
    return {r[0]: int(r[1]) for r in rows}


def stopped_at(engine: Engine, since_ts: int) -> dict[str, int]:
    """Card key -> when its last release, eviction or retirement since `since_ts` took effect (was acted on), for
    every card that has one."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT c.card_key, MAX(d.acted_ts) FROM decisions d JOIN cards c ON c.id = d.card_id "
                 "WHERE d.kind IN ('release', 'evict', 'retire') AND d.ts >= :lo AND d.acted_ts IS NOT NULL "
                 "GROUP BY c.card_key"),
            {"lo": int(since_ts)},
        ).all()
    return {r[0]: int(r[1]) for r in rows}


def journal_records(engine: Engine, entries) -> int:
    """Journal records that close nothing and wait for no actuator (`reconcile`), in one transaction; a record
    already there (same key) is not written twice. Returns the records written."""
    entries = list(entries)
    if not entries:
        return 0
    written = 0
    with engine.begin() as conn:
        for e in entries:
            card_id = None
            if e.card_key:
                card_id = conn.execute(text("SELECT id FROM cards WHERE card_key = :k"), {"k": e.card_key}).scalar()
            written += conn.execute(
                text("INSERT INTO decisions (ts, kind, card_id, reason, detail_json, decision_key, acted_ts) "
                     "VALUES (:t, :kind, :c, :r, :d, :key, :t) ON CONFLICT (decision_key) DO NOTHING"),
                {"t": int(e.ts), "kind": e.kind, "c": card_id, "r": e.reason,
                 "d": json.dumps(dict(e.detail or {}), sort_keys=True), "key": e.key},
            ).rowcount
    return written


def all_cards(engine: Engine) -> list[str]:
    """Every card key the store knows."""
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(text("SELECT card_key FROM cards ORDER BY id")).all()]
