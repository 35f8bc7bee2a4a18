"""Cards by hand and by their telemetry: an operator's retirement, and when each card was last heard from.

`retire_card` writes the `retire` record (keyed `retire:CARD`, so a card is
retired once), the card's `retired_ts`, and the end of its run-set interval, in
one transaction; `journal_records` writes the reconcile check's records and keeps
the open mismatches with them. The reads give the reconcile check (`fleet.service.
reconcile`) each card's last telemetry and last tokens served from the card itself
(kept by ingest), and the journal's few records of a kind through its (kind, ts)
index: no scan of the samples, nor of the journal.
"""

from __future__ import annotations

import json
from typing import AbstractSet, Iterable

from sqlalchemy import Engine, bindparam, text

from storage.bulk_rows import driver_rows
from storage.values import JournalEntry, JournalRow, Kind
from storage.records import RetireRecord

RETIRE_KIND = Kind.RETIRE
RECONCILE_KIND = Kind.RECONCILE


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
             "d": json.dumps(RetireRecord(by=by, reason=reason).to_detail(), sort_keys=True), "key": f"{RETIRE_KIND}:{card_key}"},
        ).rowcount == 1
        if not added:
            return False
        conn.execute(text("UPDATE cards SET retired_ts = :t WHERE id = :c"), {"t": int(ts), "c": card_id})
        conn.execute(text("UPDATE run_set_intervals SET end_ts = :t WHERE card_id = :c AND end_ts IS NULL"),
                     {"t": int(ts), "c": card_id})
    return True


OPEN_AT = ("SELECT card_id, start_ts FROM run_set_intervals WHERE end_ts IS NULL AND start_ts <= {m} UNION ALL "
           "SELECT card_id, start_ts FROM run_set_intervals WHERE end_ts > {m} AND start_ts <= {m}")
"""(card id, start) of every run-set interval open at a time (bound three times, `open_at_params`): the open intervals
and those ending after it, each part a range of the (end_ts, card_id, start_ts) index, never a scan of the intervals
the month has closed (revision 0008). `{m}`: the driver's placeholder (`storage.bulk_rows.driver_rows`)."""


def open_at_params(ts: int) -> tuple[int, int, int]:
    return (int(ts),) * 3


def last_heard(engine: Engine) -> dict[str, int | None]:
    """Card key -> the time of its last telemetry, None if it never sent any: kept on the card by the ingest that
    stores a newer sample (revision 0008), so every card's is one read of the cards, not two seeks per card."""
    return dict(driver_rows(engine, "SELECT card_key, last_heard_ts FROM cards", ()))


STOP_KINDS = ("release", "evict", "retire")
_IDS_PER_READ = 500
"""Card ids bound in one read of their stops (far under any driver's limit on bound values)."""


def still_serving(engine: Engine, since_ts: int, recent_from_ts: int, warm: AbstractSet[str] = frozenset()
                  ) -> dict[str, tuple[int, int]]:
    """Card key -> (when its last release, eviction or retirement since `since_ts` took effect, its last sample with
    tokens served), for every card not in `warm` that served tokens after both that time and `recent_from_ts`.

    The cards come from each card's last sample with tokens, kept on the card by ingest (revision 0009): only those
    that served after `recent_from_ts` and are not warm can be stopped and still serving, and only their stops are
    read (through the journal's (card, ts) index), never every stop of the lookback. That last sample is the one
    the check needs: if it is after both times, it is the latest such sample.
    """
    served = [(cid, key, int(ts)) for cid, key, ts in
              driver_rows(engine, "SELECT id, card_key, last_served_ts FROM cards WHERE last_served_ts > {m}",
                          (int(recent_from_ts),)) if key not in warm]
    stopped: dict[int, int] = {}
    kinds = ", ".join(f"'{k}'" for k in STOP_KINDS)  # constants of this module, not input
    for i in range(0, len(served), _IDS_PER_READ):
        ids = tuple(int(cid) for cid, _, _ in served[i : i + _IDS_PER_READ])
        marks = ", ".join(["{m}"] * len(ids))
        stopped.update(driver_rows(
            engine, f"SELECT card_id, MAX(acted_ts) FROM decisions WHERE card_id IN ({marks}) AND kind IN ({kinds}) "
                    "AND ts >= {m} AND acted_ts IS NOT NULL GROUP BY card_id", ids + (int(since_ts),)))
    return {key: (int(stopped[cid]), ts) for cid, key, ts in served
            if stopped.get(cid) is not None and ts > stopped[cid]}


def warm_since(engine: Engine, ts: int) -> dict[str, int]:
    """Card key -> the start of its run-set interval open at `ts`, for every card warm then."""
    rows = driver_rows(engine, f"SELECT c.card_key, o.start_ts FROM ({OPEN_AT}) o JOIN cards c ON c.id = o.card_id",
                       open_at_params(ts))
    out = dict(rows)
    if len(out) < len(rows):  # a card with two intervals open at once (none should be) counts from the later
        out = {}
        for key, start in rows:
            if key not in out or start > out[key]:
                out[key] = start
    return out


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
            new_id = conn.execute(
                text("INSERT INTO decisions (ts, kind, card_id, reason, detail_json, decision_key, acted_ts) "
                     "VALUES (:t, :kind, :c, :r, :d, :key, :t) ON CONFLICT (decision_key) DO NOTHING RETURNING id"),
                {"t": int(e.ts), "kind": e.kind, "c": card_id, "r": e.reason,
                 "d": json.dumps(dict(e.detail or {}), sort_keys=True), "key": e.key},
            ).scalar()
            if new_id is None:
                continue
            written += 1
            if e.kind == RECONCILE_KIND and card_id is not None:
                _keep_open(conn, int(card_id), dict(e.detail or {}), int(new_id))
    return written


def _keep_open(conn, card_id: int, detail: dict, decision_id: int) -> None:
    """`reconcile_open` after a reconcile record: a `seen` one opens its (card, mismatch), a `cleared` one closes it
    (revision 0009), as the fold over every record did."""
    mismatch = detail.get("mismatch")
    if mismatch is None:
        return
    if detail.get("state") == "seen":
        conn.execute(text("INSERT INTO reconcile_open (card_id, mismatch, decision_id) VALUES (:c, :m, :d) "
                          "ON CONFLICT (card_id, mismatch) DO UPDATE SET decision_id = excluded.decision_id"),
                     {"c": card_id, "m": mismatch, "d": decision_id})
    else:
        conn.execute(text("DELETE FROM reconcile_open WHERE card_id = :c AND mismatch = :m"), {"c": card_id, "m": mismatch})


def records_of_kinds(engine: Engine, kinds: Iterable[str], since_ts: int | None = None) -> list[JournalRow]:
    """The journal's rows of these kinds (at or after `since_ts`), oldest first: one plain read for the few records
    the decide job checks every hour (set aside, retired), without the journal view's join and ordering over
    every row, which grow with the month."""
    kinds = list(kinds)
    names = {f"k{i}": k for i, k in enumerate(kinds)}
    sql = ("SELECT id, decision_key, ts, kind, card_id, reason, detail_json, acted_ts FROM decisions "
           f"WHERE kind IN ({', '.join(':' + n for n in names)})" + (" AND ts >= :lo" if since_ts is not None else ""))
    with engine.connect() as conn:
        rows = sorted(conn.execute(text(sql), {**names, **({"lo": int(since_ts)} if since_ts is not None else {})}).all())
        keys = dict(conn.execute(text("SELECT id, card_key FROM cards")).all()) if any(r[4] is not None for r in rows) else {}
    return [JournalRow(int(r[0]), r[1], int(r[2]), Kind(r[3]), keys.get(r[4]), r[5], json.loads(r[6] or "{}"), r[7]) for r in rows]


def last_actions_not_carried_out(engine: Engine, since_ts: int, until_ts: int) -> dict[str, JournalRow]:
    """Card -> its last run-set action journaled in [since_ts, until_ts), for each card whose last one was set aside
    or expired (a record keyed `KEY:act-failed` or `KEY:act-expired` closes it). One statement, from the cards of the
    set-aside records (found by kind, revision 0009: few, and none in a month the actuator kept up with) to each one's
    last action through the (card, ts) index, each closing record through the unique key; never the month's actions."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT d.id, d.decision_key, d.ts, d.kind, c.card_key, d.reason, d.acted_ts "
                 "FROM decisions d JOIN cards c ON c.id = d.card_id "
                 "WHERE d.id IN (SELECT (SELECT MAX(a.id) FROM decisions a WHERE a.card_id = x.card_id "
                 "AND a.ts >= :lo AND a.ts < :hi AND a.kind IN ('add', 'release', 'evict')) "
                 "FROM (SELECT DISTINCT s.card_id FROM decisions s WHERE s.kind IN ('act-failed', 'act-expired') "
                 "AND s.card_id IS NOT NULL) x) "
                 r"AND EXISTS (SELECT 1 FROM decisions s WHERE s.decision_key IN (d.decision_key || '\:act-failed', "
                 r"d.decision_key || '\:act-expired'))"),
            {"lo": int(since_ts), "hi": int(until_ts)},
        ).all()
    return {r[4]: JournalRow(int(r[0]), r[1], int(r[2]), Kind(r[3]), r[4], r[5], {}, r[6]) for r in rows}


def run_set_actions(engine: Engine, card_keys: Iterable[str], since_ts: int, until_ts: int
                    ) -> dict[str, list[tuple[JournalRow, bool]]]:
    """Card -> its run-set actions journaled in [since_ts, until_ts), oldest first, each with whether it stands:
    carried out or still to be, False where a `KEY:act-failed` or `KEY:act-expired` record closes it. Read for the
    few cards whose last action did not stand (`last_actions_not_carried_out`), through the (card, ts) index."""
    keys = sorted(set(card_keys))
    out: dict[str, list[tuple[JournalRow, bool]]] = {}
    sql = text("SELECT d.id, d.decision_key, d.ts, d.kind, c.card_key, d.reason, d.acted_ts, "
               r"EXISTS (SELECT 1 FROM decisions s WHERE s.decision_key IN (d.decision_key || '\:act-failed', "
               r"d.decision_key || '\:act-expired')) "
               "FROM decisions d JOIN cards c ON c.id = d.card_id WHERE c.card_key IN :keys "
               "AND d.ts >= :lo AND d.ts < :hi AND d.kind IN ('add', 'release', 'evict') ORDER BY d.ts, d.id"
               ).bindparams(bindparam("keys", expanding=True))
    with engine.connect() as conn:
        for i in range(0, len(keys), _IDS_PER_READ):
            for r in conn.execute(sql, {"keys": keys[i:i + _IDS_PER_READ], "lo": int(since_ts), "hi": int(until_ts)}):
                row = JournalRow(int(r[0]), r[1], int(r[2]), Kind(r[3]), r[4], r[5], {}, r[6])
                out.setdefault(r[4], []).append((row, not r[7]))
    return out


class SqlReconcileStore:
    """`storage.interfaces.ReconcileStore` on one engine: the functions above, bound to their store."""

    def __init__(self, engine: Engine):
        self._engine = engine

    def retire_card(self, card_key: str, ts: int, reason: str, by: str) -> bool:
        return retire_card(self._engine, card_key, ts, reason, by)

    def last_heard(self) -> dict[str, int | None]:
        return last_heard(self._engine)

    def still_serving(self, since_ts: int, recent_from_ts: int, warm: AbstractSet[str] = frozenset()
                      ) -> dict[str, tuple[int, int]]:
        return still_serving(self._engine, since_ts, recent_from_ts, warm)

    def warm_since(self, ts: int) -> dict[str, int]:
        return warm_since(self._engine, ts)

    def journal_records(self, entries: Iterable[JournalEntry]) -> int:
        return journal_records(self._engine, entries)

    def records_of_kinds(self, kinds: Iterable[str], since_ts: int | None = None) -> list[JournalRow]:
        return records_of_kinds(self._engine, kinds, since_ts)

    def last_actions_not_carried_out(self, since_ts: int, until_ts: int) -> dict[str, JournalRow]:
        return last_actions_not_carried_out(self._engine, since_ts, until_ts)

    def run_set_actions(self, card_keys: Iterable[str], since_ts: int, until_ts: int
                        ) -> dict[str, list[tuple[JournalRow, bool]]]:
        return run_set_actions(self._engine, card_keys, since_ts, until_ts)
