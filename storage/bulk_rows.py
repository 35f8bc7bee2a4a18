"""The score job's rows in bulk, on a connection's own driver cursor: an hour's scores written, the rollups read.

The score job writes a row per card and window every hour and reads a rollup per
card, so each row's cost in the driver counts: the scores go in as a COPY on
PostgreSQL and as INSERTs of `SCORE_ROWS_PER_STATEMENT` rows each elsewhere (one
VALUES list: a third of the CPU SQLite's driver spends on an executemany of one
row at a time), and the rollups come out as one array per chunk of
`ROLLUP_CHUNK_ROWS` rows, never a Python object per value kept. Values are
always bound, never inlined (`mark` is the driver's placeholder).
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import Connection

from storage.busy import MEASURED_TPS_SQL

SCORE_ROWS_PER_STATEMENT = 199
"""Score rows in one INSERT's VALUES list: 995 bound values, under the least limit any SQLite has had (999)."""

ROLLUP_CHUNK_ROWS = 65_536
"""Rollup rows turned into one array at a time."""

_UPSERT = ("INSERT INTO scores (card_id, hour_ts, window_hours, score_tps, tokens_per_usd) {source} "
           "ON CONFLICT (hour_ts, window_hours, card_id) DO UPDATE SET score_tps = excluded.score_tps, "
           "tokens_per_usd = excluded.tokens_per_usd")


def write_scores(conn: Connection, mark: str, arrays: tuple[np.ndarray, ...]) -> None:
    """Upsert score rows given as arrays (card id, hour ts, window hours, score_tps, tokens_per_usd), one row per
    (card, hour, window), in the caller's transaction, in the table's key order: an hour's rows appended together."""
    card_id, hour_ts, window_hours, score, tpd = arrays
    n = len(card_id)
    order = np.lexsort((card_id, window_hours, hour_ts))
    columns = [c[order].tolist() for c in (card_id, hour_ts, window_hours, score, tpd)]
    cur = conn.connection.driver_connection.cursor()
    try:
        if conn.dialect.driver == "psycopg":
            cur.execute("CREATE TEMPORARY TABLE scores_in (card_id integer, hour_ts bigint, window_hours integer, "
                        "score_tps double precision, tokens_per_usd double precision) ON COMMIT DROP")
            with cur.copy("COPY scores_in (card_id, hour_ts, window_hours, score_tps, tokens_per_usd) FROM STDIN") as cp:
                for row in zip(*columns):
                    cp.write_row(row)
            cur.execute(_UPSERT.format(source="SELECT * FROM scores_in"))
            return
        flat: list = [None] * (5 * n)  # row after row: card, hour, window, score, tokens per dollar
        for j, col in enumerate(columns):
            flat[j::5] = col
        row = f"({', '.join([mark] * 5)})"
        step = SCORE_ROWS_PER_STATEMENT
        for i in range(0, n, step):
            part = flat[5 * i:5 * (i + step)]
            cur.execute(_UPSERT.format(source="VALUES " + ", ".join([row] * (len(part) // 5))), part)
    finally:
        cur.close()


def read_rollup_means(conn: Connection, mark: str, since_ts: int, until_ts: int,
                      busy_floor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(card id, hour ts, measured tok/s) of every hourly rollup in [since_ts, until_ts), along the rollups' (hour,
    card) key: an hour's rows lie together. The measured rate is worked out by the database (`MEASURED_TPS_SQL`, the
    rule of `busy_rate_tps`), and each chunk of rows becomes one float64 array (ids and times are exact below 2**53),
    so a week of 100,000 cards (a restart's first read) costs a chunk's memory, not the week's."""
    parts = []
    cur = conn.connection.driver_connection.cursor()
    try:
        cur.execute(
            f"SELECT r.card_id, r.hour_ts, {MEASURED_TPS_SQL.format(floor=mark)} FROM hourly_rollups r "
            f"WHERE r.hour_ts >= {mark} AND r.hour_ts < {mark}",
            (float(busy_floor), float(busy_floor), int(since_ts), int(until_ts)),
        )
        while rows := cur.fetchmany(ROLLUP_CHUNK_ROWS):
            m = np.array(rows, dtype=np.float64)  # a NULL rate (no samples) becomes NaN
            parts.append((m[:, 0].astype(np.int64), m[:, 1].astype(np.int64), m[:, 2]))
    finally:
        cur.close()
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64)
    return tuple(np.concatenate(c) for c in zip(*parts))


def driver_rows(engine, sql: str, params: tuple) -> list[tuple]:
    """The rows of one read as the driver's plain tuples, on its own cursor: for the reads of a row per card every
    tick, where building the engine's row objects costs more than the database's answer. `{m}` in `sql` stands for the driver's placeholder; values are bound, never inlined."""
    with engine.connect() as conn:
        cur = conn.connection.driver_connection.cursor()
        try:
            cur.execute(sql.format(m=placeholder(engine)), params)
            return cur.fetchall()
        finally:
            cur.close()


def placeholder(engine) -> str:
    """The driver's placeholder, for a statement run on its own cursor (parameters are still bound, never inlined)."""
    mark = {"qmark": "?", "format": "%s", "pyformat": "%s"}.get(engine.dialect.paramstyle)
    if mark is None:
        raise ValueError(f"driver paramstyle {engine.dialect.paramstyle!r} is not supported")
    return mark
