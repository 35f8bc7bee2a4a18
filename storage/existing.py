"""Opening a store that must already be there: the read-only commands' way in.

`open_repository` gives a new database the schema, which is right for `fleet
serve` and `fleet ingest` and wrong for a command that only reads: a mistyped
path would become an empty store and the command would report on nothing. So a
reader opens with `open_existing`, which refuses, as a `StoreError` naming the
URL with its password masked, a SQLite path that holds no file, a database with
no fleet schema, and one at an older schema (the same words as `open_repository`
uses). A SQLite file is looked at through a read-only connection first, so not
even a journal or a WAL header is written to a file that turns out not to be a
store.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import Engine

from storage.db import (StoreError, configured_busy_timeout_ms, current_revision, head_revision, make_engine, parse_url,
                        shown_url, sqlite_read_only_uri)


def sqlite_file(url: str) -> str | None:
    """The file a SQLite URL names ("" for an in-memory one), or None for another backend or a bad URL: what a
    command asks of a URL before opening it, without parsing it itself."""
    try:
        parsed = parse_url(url)
    except StoreError:
        return None  # make_engine says what is wrong with it
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    if str(parsed.query.get("uri", "")).lower() in ("true", "1") and database.startswith("file:"):
        from urllib.parse import unquote

        # a SQLite URI filename (`file:/path/s.db?mode=ro` with uri=true): the file is its path
        database = unquote(database[len("file:"):].split("?", 1)[0])
        if database.startswith("//"):
            database = database[2:]
    return database


def _sqlite_revision(url: str, path: str) -> str | None:
    """The schema revision of the SQLite file at `path`, read without writing anything; None: no fleet schema."""
    shown = shown_url(url)
    if path == ":memory:" or path == "":
        raise StoreError(f"database {shown!r}: an in-memory database holds no store to read")
    p = Path(path)
    if p.is_dir():
        raise StoreError(f"database {shown!r}: is a directory, not a store")
    if not p.is_file():
        raise StoreError(f"database {shown!r}: no such file; no store there (nothing was created)")
    try:
        conn = sqlite3.connect(sqlite_read_only_uri(p), uri=True)
    except sqlite3.Error as err:
        raise StoreError(f"database {shown!r}: {err}") from None
    try:
        has = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'").fetchone()
        if has is None:
            return None
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        return None if row is None else str(row[0])
    except sqlite3.DatabaseError as err:
        raise StoreError(f"database {shown!r}: {err}") from None
    finally:
        conn.close()


def existing_revision(url: str) -> str:
    """The schema revision of the store at `url`; a `StoreError` if there is no store there (nothing is created).
    A bad `FLEET_DB_BUSY_TIMEOUT` is said first, as opening any store would say it."""
    configured_busy_timeout_ms()
    shown = shown_url(url)
    path = sqlite_file(url)
    if path is not None:
        revision = _sqlite_revision(url, path)
    else:
        revision = current_revision(make_engine(url))
    if revision is None:
        raise StoreError(f"database {shown!r}: not a fleet store (no fleet schema); nothing was created")
    return revision


def open_existing(url: str, read_only: bool = False) -> Engine:
    """An engine on the fleet store at `url`, at this fleet's schema, for reading.

    A store that is not there, holds no fleet schema, or holds an older one is a
    `StoreError` (bad input, exit status 2) naming the URL with its password masked.
    """
    revision = existing_revision(url)
    head = head_revision()
    if revision != head:
        shown = shown_url(url)
        raise StoreError(f"database {shown!r} is at schema revision {revision}, this fleet needs {head}: "
                         f"run `fleet db upgrade --db {shown}`")
    return make_engine(url, read_only=read_only)
