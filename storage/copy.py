"""PostgreSQL's `COPY` for the store: the ingest's samples, and a whole store moved from one database to another.

Samples: a batch goes by binary `COPY` into a temporary staging table (no index, no
write-ahead log), then one `INSERT ... SELECT ... ON CONFLICT DO NOTHING` moves it
into `telemetry_samples`; the insert's row count is the number stored, so the
repository tells duplicates from conflicts as it does on SQLite. The binary rows
are built with numpy, a few arrays for the whole batch, not a Python call per row.

A store: `copy_store` moves every table of the models (`storage.models.Base`, so a
table added by a new revision is copied without a change here) from one URL to
another, any backends, in foreign-key order, in batches (bound parameters, or
`COPY` into PostgreSQL), in one transaction on the target. The target must be
empty; it is given the source's schema revision. Every table's row count is
checked against the source's (read in one snapshot) before the transaction
commits, and PostgreSQL's sequences are set past the copied ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from sqlalchemy import Connection, Engine, column, inspect, select, table, text

from storage.db import StoreError, _opened, _write_transaction, current_revision, make_engine, shown_url, upgrade

STAGING = "fleet_sample_staging"
_HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
_TRAILER = (-1).to_bytes(2, "big", signed=True)
# A binary COPY row of the staging table: field count, then each field's length and value, big-endian.
_WITH_BUSY = np.dtype([("n", ">i2"), ("l_card", ">i4"), ("card", ">i4"), ("l_ts", ">i4"), ("ts", ">i8"),
                       ("l_tps", ">i4"), ("tps", ">f8"), ("l_busy", ">i4"), ("busy", ">f8")])
_NO_BUSY = np.dtype([("n", ">i2"), ("l_card", ">i4"), ("card", ">i4"), ("l_ts", ">i4"), ("ts", ">i8"),
                     ("l_tps", ">i4"), ("tps", ">f8"), ("l_busy", ">i4")])


def _binary_rows(card_id: np.ndarray, ts: np.ndarray, tps: np.ndarray, busy: np.ndarray) -> bytes:
    """The whole `COPY ... (FORMAT BINARY)` stream of these samples (busy NaN is NULL); rows with a busy fraction
    first, then those without (the staging table has no order)."""
    parts = [_HEADER]
    has = ~np.isnan(busy)
    for dtype, pick in ((_WITH_BUSY, has), (_NO_BUSY, ~has)):
        k = int(pick.sum())
        if not k:
            continue
        rows = np.empty(k, dtype=dtype)
        rows["n"] = 4
        rows["l_card"], rows["l_ts"], rows["l_tps"] = 4, 8, 8
        rows["card"], rows["ts"], rows["tps"] = card_id[pick], ts[pick], tps[pick]
        if dtype is _WITH_BUSY:
            rows["l_busy"], rows["busy"] = 8, busy[pick]
        else:
            rows["l_busy"] = -1  # NULL
        parts.append(rows.tobytes())
    parts.append(_TRAILER)
    return b"".join(parts)


def copy_samples(conn: Connection, batch_id: int, card_id: np.ndarray, ts: np.ndarray, tps: np.ndarray, busy: np.ndarray) -> int:
    """Store samples on PostgreSQL: binary `COPY` into the session's staging table (emptied at every commit), then
    one insert that drops the ones already stored. Returns how many were new."""
    cur = conn.connection.driver_connection.cursor()
    try:
        cur.execute(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGING} (card_id integer NOT NULL, ts bigint NOT NULL, "
            "tokens_per_s double precision NOT NULL, busy_fraction double precision) ON COMMIT DELETE ROWS"
        )
        with cur.copy(f"COPY {STAGING} (card_id, ts, tokens_per_s, busy_fraction) FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(_binary_rows(card_id, ts, tps, busy))
        cur.execute(
            f"INSERT INTO telemetry_samples (card_id, ts, tokens_per_s, busy_fraction, batch_id) "
            f"SELECT card_id, ts, tokens_per_s, busy_fraction, %s FROM {STAGING} ON CONFLICT (card_id, ts) DO NOTHING",
            (int(batch_id),),
        )
        stored = int(cur.rowcount)
        cur.execute(f"TRUNCATE {STAGING}")  # a second batch in the same transaction starts empty
    finally:
        cur.close()
    return stored


# -- a whole store ------------------------------------------------------------------------------------------------

class CopyCheckFailed(RuntimeError):
    """The target's row counts differ from the source's after the copy (the transaction was rolled back)."""


@dataclass(frozen=True)
class CopiedTable:
    name: str
    rows: int


@dataclass(frozen=True)
class CopyReport:
    source: str  # URLs as shown: passwords masked
    target: str
    revision: str
    tables: tuple[CopiedTable, ...]

    def as_json(self) -> dict:
        return {"from": self.source, "to": self.target, "revision": self.revision, "tables": {t.name: t.rows for t in self.tables}}


def _store_tables() -> list:
    from storage.models import Base

    return list(Base.metadata.sorted_tables)  # parents before children: the foreign keys hold at every insert


def _counts(conn: Connection, names: list[str]) -> dict[str, int]:
    q = conn.dialect.identifier_preparer.quote
    return {n: int(conn.execute(text(f"SELECT COUNT(*) FROM {q(n)}")).scalar_one()) for n in names}


def _check_target(engine: Engine, url: str, source_revision: str) -> bool:
    """Refuse a target that is not empty or not at the source's revision; True if it needs the schema made."""
    shown = shown_url(url)
    revision = current_revision(engine)
    with _opened(engine) as conn:
        present = set(inspect(conn).get_table_names())
        if revision is None:
            if present:
                raise StoreError(f"database {shown!r} is not empty: it has tables ({', '.join(sorted(present)[:5])}) "
                                 "and no fleet schema; fleet db copy writes into an empty store only")
            return True
        names = [t.name for t in _store_tables() if t.name in present]
        for name, n in _counts(conn, names).items():
            if n:
                raise StoreError(f"database {shown!r} is not empty ({name} has {n:,} rows): fleet db copy writes into an empty store only")
    if revision != source_revision:
        raise StoreError(f"database {shown!r} is at schema revision {revision}, the source at {source_revision}: "
                         "copy into a new, empty database")
    return False


def _refuse_missing_sqlite_source(url: str) -> None:
    """A SQLite source that is no file is a `StoreError` naming it, found without creating the file."""
    from storage.db import parse_url

    try:
        parsed = parse_url(url)
    except StoreError:
        return  # make_engine says what is wrong with it
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        if not Path(parsed.database).is_file():
            raise StoreError(f"database {shown_url(url)!r}: no such file; nothing to copy (nothing was created)")


def _refuse_another_identity(src: Engine, dst: Engine, dst_shown: str) -> None:
    """A target that holds a store of another identity (a simulation, a real pool) is refused by name, before the
    emptiness check would refuse it less clearly; an empty target has none and is taken."""
    from storage.identity import read_identity

    def identity(engine: Engine):
        if current_revision(engine) is None:
            return None
        with _opened(engine) as conn:
            if not {"store_meta", "ingest_runs"} <= set(inspect(conn).get_table_names()):
                return None
        return read_identity(engine)

    held = identity(dst)
    source = identity(src) if held is not None else None
    if held is not None and source is not None and not held.matches(source):
        raise StoreError(f"database {dst_shown!r} holds {held.describe()}; it cannot take a copy of {source.describe()} "
                         "(give another --to)")


def copy_store(from_url: str, to_url: str, batch_rows: int = 10_000, progress: Callable[[str, int], None] | None = None) -> CopyReport:
    """Copy every table of the store at `from_url` into the empty database at `to_url` (any backends), at the source's
    schema revision; the target's counts are checked against the source's before the copy commits."""
    src_shown, dst_shown = shown_url(from_url), shown_url(to_url)
    if batch_rows < 1:
        raise StoreError(f"batch of {batch_rows} rows: expected at least 1")
    _refuse_missing_sqlite_source(from_url)  # a mistyped --from is an error, never a new empty file
    src, dst = make_engine(from_url), make_engine(to_url)
    if src.url.render_as_string(hide_password=False) == dst.url.render_as_string(hide_password=False):
        raise StoreError(f"--from and --to are the same database ({src_shown!r})")
    revision = current_revision(src)
    if revision is None:
        raise StoreError(f"database {src_shown!r} has no fleet schema: nothing to copy")
    _refuse_another_identity(src, dst, dst_shown)
    if _check_target(dst, to_url, revision):
        upgrade(to_url, revision, engine=dst)  # Alembic's own version row says the source's revision

    with _opened(src) as read:
        if read.dialect.name == "postgresql":
            read = read.execution_options(isolation_level="REPEATABLE READ")  # one snapshot for counts and rows
        with read.begin():
            present = set(inspect(read).get_table_names())
            tables = [t for t in _store_tables() if t.name in present]
            source_columns = {t.name: [c["name"] for c in inspect(read).get_columns(t.name)] for t in tables}
            want = _counts(read, [t.name for t in tables])
            with _opened(dst) as write, _write_transaction(write):
                target_columns = {t.name: {c["name"] for c in inspect(write).get_columns(t.name)} for t in tables}
                for t in reversed(tables):  # rows a migration seeded into the new schema: the source's copies replace them
                    write.execute(text(f"DELETE FROM {write.dialect.identifier_preparer.quote(t.name)}"))
                for t in tables:
                    cols = [c for c in source_columns[t.name] if c in target_columns[t.name]]
                    _copy_table(read, write, t, cols, batch_rows)
                    if progress:
                        progress(t.name, want[t.name])
                got = _counts(write, [t.name for t in tables])
                wrong = {n: (want[n], got[n]) for n in want if want[n] != got[n]}
                if wrong:
                    detail = ", ".join(f"{n}: {a:,} in the source, {b:,} copied" for n, (a, b) in wrong.items())
                    raise CopyCheckFailed(f"copy {src_shown} -> {dst_shown}: row counts differ ({detail}); nothing was kept")
                if write.dialect.name == "postgresql":
                    _set_sequences(write, tables)
    if current_revision(dst) != revision:
        raise CopyCheckFailed(f"copy {src_shown} -> {dst_shown}: the target is not at revision {revision}")
    return CopyReport(src_shown, dst_shown, revision, tuple(CopiedTable(t.name, want[t.name]) for t in tables))


def _copy_table(read: Connection, write: Connection, model, cols: list[str], batch_rows: int) -> None:  # noqa: ANN001
    """One table, `batch_rows` rows at a time, in primary-key order: `COPY` into PostgreSQL, executemany of bound
    parameters elsewhere."""
    src_table = table(model.name, *[column(c) for c in cols])
    key = [src_table.c[c.name] for c in model.primary_key.columns if c.name in cols]
    rows = read.execution_options(stream_results=True, yield_per=batch_rows).execute(select(src_table).order_by(*key))
    if write.dialect.name == "postgresql":
        q = write.dialect.identifier_preparer.quote
        cur = write.connection.driver_connection.cursor()
        try:
            with cur.copy(f"COPY {q(model.name)} ({', '.join(q(c) for c in cols)}) FROM STDIN") as copy:
                for part in rows.partitions():
                    for row in part:
                        copy.write_row(tuple(row))
        finally:
            cur.close()
        return
    target = table(model.name, *[column(c) for c in cols])
    for part in rows.partitions():
        write.execute(target.insert(), [dict(zip(cols, row)) for row in part])


def _set_sequences(write: Connection, tables: list) -> None:
    """Every id sequence past the largest copied id, so the next insert does not collide with a copied row."""
    for t in tables:
        col = t.autoincrement_column
        if col is None:
            continue
        seq = write.execute(text("SELECT pg_get_serial_sequence(:t, :c)"), {"t": t.name, "c": col.name}).scalar_one()
        if seq is None:
            continue
        q = write.dialect.identifier_preparer.quote
        top = write.execute(text(f"SELECT MAX({q(col.name)}) FROM {q(t.name)}")).scalar_one()
        write.execute(text("SELECT setval(CAST(:s AS regclass), :v, :called)"),
                      {"s": seq, "v": int(top) if top is not None else 1, "called": top is not None})
