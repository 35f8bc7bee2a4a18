"""The journal store on SQLAlchemy: `ServiceStore`, the implementation of `storage.interfaces.JournalStore`.

The decision journal, the run set, scores, billed hours. `ServiceStore` sits
beside `SqlRepository` on the same engine and keeps to the same rules: plain SQL with bound parameters, one transaction per call. Every
write transaction starts with its first write (lookups run before it, on their
own), so on SQLite it takes the write lock at once and waits its turn under
the busy timeout instead of failing on a read snapshot it cannot upgrade. The call
that matters most is `journal_hour`: an hour's decisions, the run-set intervals
they open and close, and the cards they evict go in together or not at all,
and journaling the same hour twice adds nothing (unique `decision_key`).
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping, Sequence

import numpy as np
from sqlalchemy import Engine, bindparam, text

from storage.bulk_rows import driver_rows, placeholder, write_scores
from storage.cards import OPEN_AT, open_at_params
from fleet.core.units import HOUR_S
from storage.values import HourFigures, JournalEntry, JournalRow, Kind, ScoreColumn

__all__ = ["HOUR_COLUMNS", "HourFigures", "JournalEntry", "JournalRow", "ServiceStore"]

HOUR_COLUMNS = tuple(HourFigures.__dataclass_fields__)


class ServiceStore:
    """`storage.interfaces.JournalStore` on SQLAlchemy Core, on the engine of the telemetry store beside it."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._card_ids: dict[str, int] = {}  # a card's id never changes: cached
        self._card_keys: dict[int, str] = {}  # and the other way round

    # -- the journal ------------------------------------------------------------------
    def _ids(self, keys: Iterable[str]) -> dict[str, int]:
        known = self._card_ids
        keys = set(keys)
        # Each key looked up, never `keys - known.keys()`: that builds a set of every known card, each call.
        if any(k not in known for k in keys):
            with self.engine.connect() as conn:
                self._card_ids = known = dict(conn.execute(text("SELECT card_key, id FROM cards")).all())
        unknown = sorted(k for k in keys if k not in known)
        if unknown:
            raise KeyError(f"unknown card {unknown[0]!r}")
        return {k: known[k] for k in keys}

    def _keys(self, ids: Iterable[int]) -> list[str]:
        """The card keys of these card ids, from the cached cards (read again when one is not known yet)."""
        ids = list(ids)
        if len(self._card_keys) != len(self._card_ids):
            self._card_keys = {i: k for k, i in self._card_ids.items()}
        if any(i not in self._card_keys for i in ids):
            with self.engine.connect() as conn:
                self._card_ids = dict(conn.execute(text("SELECT card_key, id FROM cards")).all())
            self._card_keys = {i: k for k, i in self._card_ids.items()}
        return [self._card_keys[i] for i in ids]

    def record_scores(self, hour_scores: Sequence[tuple[int, int, Mapping[str, tuple[float, float]]]]) -> None:
        """Scores of several hours in one transaction: (hour ts, window hours, card key → (score_tps, tokens_per_usd)).
        A rerun replaces them. A `ScoreColumn` is written from its arrays; on PostgreSQL (psycopg 3) the rows go in by
        one COPY, elsewhere by statements of many rows each (`storage.bulk_rows`)."""
        card_id, hour_ts, window_hours, score, tpd = self._score_arrays(hour_scores)
        if not len(card_id):
            return
        with self.engine.begin() as conn:
            write_scores(conn, placeholder(self.engine), (card_id, hour_ts, window_hours, score, tpd))

    def _score_arrays(self, hour_scores) -> tuple[np.ndarray, ...]:
        """(card id, hour ts, window hours, score_tps, tokens_per_usd) of every row, as arrays; the last of a
        repeated (card, hour, window) wins, as it would row by row."""
        parts = []
        plain = [sc for _, _, sc in hour_scores if not isinstance(sc, ScoreColumn)]
        ids = self._ids({k for sc in plain for k in sc}) if plain else {}
        for h, w, sc in hour_scores:
            if isinstance(sc, ScoreColumn):
                cid, v, t = sc.arrays()
            else:
                cid = np.array([ids[k] for k in sc], dtype=np.int64)
                v = np.array([float(x[0]) for x in sc.values()], dtype=np.float64)
                t = np.array([float(x[1]) for x in sc.values()], dtype=np.float64)
            parts.append((cid, np.full(len(cid), int(h), np.int64), np.full(len(cid), int(w), np.int64), v, t))
        if not parts:
            return tuple(np.empty(0) for _ in range(5))
        cols = [np.concatenate(c) for c in zip(*parts)]
        # In key order (hour, window, card), rows of one key in the order given (lexsort is stable): the last of each
        # run of equal keys is the row that wins. One sort of the keys, cheaper than a unique over them stacked.
        order = np.lexsort((cols[0], cols[2], cols[1]))
        cols = [c[order] for c in cols]
        last = np.ones(len(order), dtype=bool)
        last[:-1] = (cols[0][1:] != cols[0][:-1]) | (cols[1][1:] != cols[1][:-1]) | (cols[2][1:] != cols[2][:-1])
        return tuple(c[last] for c in cols)

    def journal_hour(
        self,
        hour_ts: int,
        entries: Sequence[JournalEntry],
        open_cards: Mapping[str, str],
        close_cards: Iterable[str],
        retire_cards: Iterable[str],
    ) -> bool:
        """Journal one hour's decisions with the state they leave, in one transaction.

        `open_cards` (card key → reason) start run-set intervals at `hour_ts`;
        `close_cards` end theirs; `retire_cards` leave the pool. Returns False
        (and changes nothing) if the hour's first entry is already journaled.
        """
        close_cards, retire_cards = list(close_cards), list(retire_cards)
        ids = self._ids([e.card_key for e in entries if e.card_key] + list(open_cards) + close_cards + retire_cards)
        rows = [
            {
                "t": e.ts, "k": e.kind, "c": ids[e.card_key] if e.card_key else None, "r": e.reason,
                "d": json.dumps(dict(e.detail or {}), sort_keys=True), "key": e.key, "a": e.ts if e.acted else None,
            }
            for e in entries
        ]
        insert = text(
            "INSERT INTO decisions (ts, kind, card_id, reason, detail_json, decision_key, acted_ts) "
            "VALUES (:t, :k, :c, :r, :d, :key, :a) ON CONFLICT (decision_key) DO NOTHING"
        )
        with self.engine.begin() as conn:
            if rows:
                if conn.execute(insert, rows[0]).rowcount == 0:
                    return False  # the hour is journaled already; nothing was written
                if rows[1:]:
                    conn.execute(insert, rows[1:])
            if close_cards:
                conn.execute(
                    text("UPDATE run_set_intervals SET end_ts = :t WHERE card_id = :c AND end_ts IS NULL"),
                    [{"t": hour_ts, "c": ids[k]} for k in close_cards],
                )
            if open_cards:
                conn.execute(
                    text("INSERT INTO run_set_intervals (card_id, start_ts, reason) VALUES (:c, :t, :r)"),
                    [{"c": ids[k], "t": hour_ts, "r": r} for k, r in open_cards.items()],
                )
            if retire_cards:
                conn.execute(
                    text("UPDATE cards SET retired_ts = :t WHERE id = :c AND retired_ts IS NULL"),
                    [{"t": hour_ts, "c": ids[k]} for k in retire_cards],
                )
        return True

    def mark_acted_many(self, decision_ids: Sequence[int], ts: int) -> int:
        """Record a batch of decisions carried out, in one transaction; returns how many were not marked already."""
        if not decision_ids:
            return 0
        with self.engine.begin() as conn:
            return conn.execute(
                text("UPDATE decisions SET acted_ts = :t WHERE id IN :ids AND acted_ts IS NULL").bindparams(
                    bindparam("ids", expanding=True)),
                {"t": int(ts), "ids": [int(i) for i in decision_ids]},
            ).rowcount

    _ROW_SQL = (
        "SELECT d.id, d.decision_key, d.ts, d.kind, c.card_key, d.reason, d.detail_json, d.acted_ts "
        "FROM decisions d LEFT JOIN cards c ON c.id = d.card_id"
    )

    @staticmethod
    def _row(r) -> JournalRow:
        return JournalRow(int(r[0]), r[1], int(r[2]), Kind(r[3]), r[4], r[5], json.loads(r[6] or "{}"), r[7])

    # A decision closed without being carried out has a record keyed `KEY:act-failed` or `KEY:act-expired`.
    _OPEN = (" WHERE d.acted_ts IS NULL AND NOT EXISTS (SELECT 1 FROM decisions s WHERE s.decision_key IN "
             r"(d.decision_key || '\:act-failed', d.decision_key || '\:act-expired'))")  # \: a colon, not a bind

    def unacted(self, from_id: int = 0) -> list[JournalRow]:
        """Journaled decisions not yet carried out nor set aside, in the order they were journaled; those from id
        `from_id` on (an acting pass skips what an earlier one closed: set-aside decisions stay unacted for good)."""
        with self.engine.connect() as conn:
            rows = conn.execute(text(self._ROW_SQL + self._OPEN + " AND d.id >= :lo ORDER BY d.id"), {"lo": int(from_id)}).all()
        return [self._row(r) for r in rows]

    def set_aside(self, entry: JournalEntry) -> bool:
        """Journal the record that closes an action never carried out (`act-failed`, `act-expired`); False if it
        is there already."""
        card = self._ids([entry.card_key])[entry.card_key] if entry.card_key else None
        with self.engine.begin() as conn:
            return conn.execute(
                text("INSERT INTO decisions (ts, kind, card_id, reason, detail_json, decision_key, acted_ts) "
                     "VALUES (:t, :k, :c, :r, :d, :key, :t) ON CONFLICT (decision_key) DO NOTHING"),
                {"t": int(entry.ts), "k": entry.kind, "c": card, "r": entry.reason,
                 "d": json.dumps(dict(entry.detail or {}), sort_keys=True), "key": entry.key},
            ).rowcount == 1

    def oldest_unacted_ts(self, kinds: Iterable[str] = ("evict", "release", "add")) -> int | None:
        """The hour of the oldest action neither carried out nor set aside (None if there is none)."""
        kinds = list(kinds)
        names = {f"k{i}": k for i, k in enumerate(kinds)}
        with self.engine.connect() as conn:
            got = conn.execute(
                text("SELECT MIN(d.ts) FROM decisions d" + self._OPEN + f" AND d.kind IN ({', '.join(':' + n for n in names)})"),
                names,
            ).scalar()
        return None if got is None else int(got)

    @staticmethod
    def _decision_filter(card_key, kinds, since_ts, until_ts) -> tuple[list[str], dict]:
        """The WHERE terms and bound values of a journal read, written once for the rows and their count."""
        where, params = [], {}
        if card_key is not None:
            where.append("c.card_key = :card")
            params["card"] = card_key
        if kinds is not None:
            kinds = list(kinds)
            names = [f"k{i}" for i in range(len(kinds))]
            where.append(f"d.kind IN ({', '.join(':' + n for n in names)})")
            params.update(dict(zip(names, kinds)))
        if since_ts is not None:
            where.append("d.ts >= :lo")
            params["lo"] = int(since_ts)
        if until_ts is not None:
            where.append("d.ts < :hi")
            params["hi"] = int(until_ts)
        return where, params

    def decisions(
        self, card_key: str | None = None, kinds: Iterable[str] | None = None, since_ts: int | None = None,
        until_ts: int | None = None, limit: int = 10_000, newest_first: bool = False,
    ) -> list[JournalRow]:
        """Journal rows filtered by card, kind and time: the first `limit` in the order they were journaled, or with
        `newest_first` the newest `limit` by their time, newest first (`fleet journal`'s order, without reading the
        whole journal to keep its tail). By time, not by id: a record stamped when an action expired is written
        after hours decided earlier in a catch-up, and must not sit between them."""
        where, params = self._decision_filter(card_key, kinds, since_ts, until_ts)
        params["n"] = int(limit)
        order = " ORDER BY d.ts DESC, d.id DESC LIMIT :n" if newest_first else " ORDER BY d.id LIMIT :n"
        sql = self._ROW_SQL + (" WHERE " + " AND ".join(where) if where else "") + order
        with self.engine.connect() as conn:
            rows = conn.execute(text(sql), params).all()
        return [self._row(r) for r in rows]

    def reconcile_open(self) -> list[JournalRow]:
        """The record that saw each reconcile mismatch still open (seen, not cleared since), oldest first: the few
        rows `reconcile_open` keeps (revision 0009), not every reconcile record."""
        with self.engine.connect() as conn:
            rows = conn.execute(text(self._ROW_SQL + " JOIN reconcile_open o ON o.decision_id = d.id ORDER BY d.id")).all()
        return [self._row(r) for r in rows]

    def decision_total(self, card_key: str | None = None, kinds: Iterable[str] | None = None, since_ts: int | None = None) -> int:
        """How many journal rows match, so a reader shown the newest few can say of how many."""
        where, params = self._decision_filter(card_key, kinds, since_ts, None)
        sql = "SELECT COUNT(*) FROM decisions d LEFT JOIN cards c ON c.id = d.card_id" + (" WHERE " + " AND ".join(where) if where else "")
        with self.engine.connect() as conn:
            return int(conn.execute(text(sql), params).scalar_one())

    def decision_counts(self, since_ts: int, until_ts: int) -> dict[str, tuple[int, int]]:
        """Per kind: (journaled, acted) in [since_ts, until_ts)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT kind, COUNT(*), COUNT(acted_ts) FROM decisions WHERE ts >= :lo AND ts < :hi GROUP BY kind"),
                {"lo": int(since_ts), "hi": int(until_ts)},
            ).all()
        return {r[0]: (int(r[1]), int(r[2])) for r in rows}

    def last_decided_ts(self, since_ts: int, until_ts: int) -> int | None:
        """The latest hour with a journaled `size` decision in [since_ts, until_ts)."""
        with self.engine.connect() as conn:
            got = conn.execute(
                text("SELECT MAX(ts) FROM decisions WHERE kind = 'size' AND ts >= :lo AND ts < :hi"),
                {"lo": int(since_ts), "hi": int(until_ts)},
            ).scalar()
        return None if got is None else int(got)

    def eviction_hours(self, since_ts: int, until_ts: int) -> list[tuple[int, str]]:
        """(hour ts, card key) of every eviction journaled in [since_ts, until_ts), oldest first."""
        return [(r.ts, r.card_key) for r in self.decisions(kinds=["evict"], since_ts=since_ts, until_ts=until_ts)]

    # -- the run set ------------------------------------------------------------------
    def run_set_at(self, hour_ts: int) -> set[str]:
        """Cards warm in the hour starting at `hour_ts`."""
        ids = {r[0] for r in driver_rows(self.engine, OPEN_AT, open_at_params(hour_ts))}
        return set(self._keys(ids))

    def retired(self) -> dict[str, int]:
        """Card key → when it left the pool, for every retired card."""
        with self.engine.connect() as conn:
            rows = conn.execute(text("SELECT card_key, retired_ts FROM cards WHERE retired_ts IS NOT NULL")).all()
        return {r[0]: int(r[1]) for r in rows}

    # -- scores -----------------------------------------------------------------------
    def _all(self, sql: str, **params) -> list:
        """The rows of one read, its values bound as parameters."""
        with self.engine.connect() as conn:
            return conn.execute(text(sql), params).all()

    def scores_at(self, hour_ts: int, window_hours: int) -> dict[str, float]:
        """Card key → score (tok/s) recorded at `hour_ts` through a window of `window_hours`."""
        rows = self._all("SELECT c.card_key, s.score_tps FROM scores s JOIN cards c ON c.id = s.card_id "
                         "WHERE s.hour_ts = :h AND s.window_hours = :w", h=int(hour_ts), w=int(window_hours))
        return {r[0]: float(r[1]) for r in rows}

    def last_scored_ts(self, window_hours: int, since_ts: int, until_ts: int) -> int | None:
        with self.engine.connect() as conn:
            got = conn.execute(
                text("SELECT MAX(hour_ts) FROM scores WHERE window_hours = :w AND hour_ts >= :lo AND hour_ts < :hi"),
                {"w": int(window_hours), "lo": int(since_ts), "hi": int(until_ts)},
            ).scalar()
        return None if got is None else int(got)

    # -- billed hours -----------------------------------------------------------------
    def intervals(self, since_ts: int, until_ts: int) -> list[tuple[str, int, int | None]]:
        """(card key, start, end or None) of run-set intervals overlapping [since_ts, until_ts)."""
        rows = self._all("SELECT c.card_key, r.start_ts, r.end_ts FROM run_set_intervals r JOIN cards c ON c.id = r.card_id "
                         "WHERE r.start_ts < :hi AND (r.end_ts IS NULL OR r.end_ts > :lo)", lo=int(since_ts), hi=int(until_ts))
        return [(r[0], int(r[1]), None if r[2] is None else int(r[2])) for r in rows]

    def record_hours(self, figs: Sequence[HourFigures], bill_lines: Sequence[Sequence[tuple[str, float, str | None]]]) -> bool:
        """Write billed hours and their bill lines in one transaction; False (nothing written) if the first is billed already.

        The hour's `size` record gains `demand_measured_tps` in the same transaction, so the journal carries the
        demand each hour had beside the forecast it was sized to."""
        if not figs:
            return False
        ids = self._ids([k for lines in bill_lines for _, _, k in lines if k])
        insert = text(
            f"INSERT INTO service_hours ({', '.join(HOUR_COLUMNS)}) VALUES ({', '.join(':' + c for c in HOUR_COLUMNS)}) "
            "ON CONFLICT (hour_ts) DO NOTHING"
        )
        rows = [{c: getattr(f, c) for c in HOUR_COLUMNS} for f in figs]
        with self.engine.begin() as conn:
            if conn.execute(insert, rows[0]).rowcount == 0:
                return False
            if rows[1:]:
                conn.execute(insert, rows[1:])
            lines = [
                {"c": ids[k] if k else None, "a": f.hour_ts, "b": f.hour_ts + HOUR_S, "k": kind, "u": float(usd)}
                for f, ls in zip(figs, bill_lines) for kind, usd, k in ls
            ]
            if lines:
                conn.execute(
                    text("INSERT INTO bills (card_id, period_start_ts, period_end_ts, kind, usd) VALUES (:c, :a, :b, :k, :u)"), lines
                )
            _note_measured(conn, figs)
        return True

    def last_billed_ts(self, month_start_ts: int | None = None) -> int | None:
        """The latest billed hour (of one month, or of any)."""
        sql, params = "SELECT MAX(hour_ts) FROM service_hours", {}
        if month_start_ts is not None:
            sql, params = sql + " WHERE month_start_ts = :m", {"m": int(month_start_ts)}
        with self.engine.connect() as conn:
            got = conn.execute(text(sql), params).scalar()
        return None if got is None else int(got)

    def hours(self, month_start_ts: int) -> list[HourFigures]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(f"SELECT {', '.join(HOUR_COLUMNS)} FROM service_hours WHERE month_start_ts = :m ORDER BY hour_ts"),
                {"m": int(month_start_ts)},
            ).all()
        return [HourFigures(*r) for r in rows]

    def bill_by_part(self, since_ts: int, until_ts: int) -> dict[str, float]:
        """USD by bill line kind for periods starting in [since_ts, until_ts)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT kind, SUM(usd) FROM bills WHERE period_start_ts >= :lo AND period_start_ts < :hi GROUP BY kind"),
                {"lo": int(since_ts), "hi": int(until_ts)},
            ).all()
        return {r[0]: float(r[1]) for r in rows}

    def scores_by_window(self, hour_ts: int) -> dict[int, dict[str, float]]:
        """Every score recorded at `hour_ts`: window hours → card key → score (tok/s)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT s.window_hours, c.card_key, s.score_tps FROM scores s JOIN cards c ON c.id = s.card_id WHERE s.hour_ts = :h"),
                {"h": int(hour_ts)},
            ).all()
        out: dict[int, dict[str, float]] = {}
        for w, k, v in rows:
            out.setdefault(int(w), {})[k] = float(v)
        return out

    def month_start_of(self, hour_ts: int) -> int | None:
        """The month a billed hour belongs to."""
        with self.engine.connect() as conn:
            got = conn.execute(text("SELECT month_start_ts FROM service_hours WHERE hour_ts = :h"), {"h": int(hour_ts)}).scalar()
        return None if got is None else int(got)


def _note_measured(conn, figs: Sequence[HourFigures]) -> None:
    """Each billed hour's measured demand into its `size` record's detail (the record is journaled before it)."""
    measured = {f"{f.hour_ts}:size": f.demand_measured_tps for f in figs if f.demand_measured_tps is not None}
    if not measured:
        return
    names = [f"k{i}" for i in range(len(measured))]
    rows = conn.execute(text(f"SELECT id, decision_key, detail_json FROM decisions WHERE decision_key IN ({', '.join(':' + n for n in names)})"),
                        dict(zip(names, measured))).all()
    updates = [{"i": r[0], "d": json.dumps({**json.loads(r[2] or "{}"), "demand_measured_tps": float(measured[r[1]])}, sort_keys=True)}
               for r in rows]
    if updates:
        conn.execute(text("UPDATE decisions SET detail_json = :d WHERE id = :i"), updates)
