"""Engines and schema: SQLite pragmas, the default database, and Alembic run from code.

The default store is `sqlite:///fleet.db`, a file in the working folder; any
SQLAlchemy URL works. On SQLite every connection gets, in this order: a busy
timeout (so a writer waits for another instead of failing, and so the switch to
WAL itself waits for a lock), WAL journaling (readers never block the writer),
`synchronous=NORMAL` (safe against a killed process; WAL keeps the file whole),
and foreign keys on (a 64 MB page cache as well). Alembic's script folder is found next to this package, so
`fleet db upgrade` works from any working directory.

The busy timeout is 30 s unless `FLEET_DB_BUSY_TIMEOUT` (seconds) says otherwise.
Two kinds of failure are told apart: a database that cannot be used as asked
(a bad URL, a file that is not a database, no server, an older schema) is a
`StoreError`, bad input; a database that refuses a write at run time (locked
past the busy timeout, read-only, disk full, an I/O error) stays the driver's
error, and `failure_reason` gives its one line.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from fleet.core.errors import ConfigError, hide_passwords  # noqa: F401  (storage.db.hide_passwords, as the shell imports it)
from fleet.core.units import seconds_setting
from storage import DEFAULT_URL

BUSY_TIMEOUT_MS = 30_000
BUSY_TIMEOUT_ENV = "FLEET_DB_BUSY_TIMEOUT"  # seconds
# SQLite's primary result codes of a database that refuses a write at run time, not one that cannot be used:
# BUSY, LOCKED, READONLY, IOERR, FULL, PROTOCOL.
RUN_TIME_CODES = frozenset({5, 6, 8, 10, 13, 15})
LOCK_CODES = frozenset({5, 6})
READONLY_CODE = 8
ALEMBIC_DIR = Path(__file__).resolve().parent.parent / "alembic"



def shown_url(url: str) -> str:
    """A database URL as it may be printed, logged or written: its password masked (whole, when the URL cannot be
    parsed or its password holds an `@` of its own)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError, TypeError):
        return hide_passwords(str(url))
    if _at_in_password(url, parsed):
        return hide_passwords(str(url))
    return hide_passwords(parsed.render_as_string(hide_password=True))


def parse_url(url: str) -> URL:
    """A database URL parsed, or a `StoreError` naming it (password masked) and what is wrong: not a URL, a port
    that is no number, or a password with an `@` not written `%40` (SQLAlchemy would read the rest as the host, port
    or database: never connected to, so no server's error repeats a piece of it)."""
    shown = shown_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(f"database URL {shown!r}: not a SQLAlchemy URL (e.g. sqlite:///fleet.db)") from None
    except (ValueError, TypeError):
        raise StoreError(f"database URL {shown!r}: {_bad_port(url)}") from None
    if _at_in_password(url, parsed):
        raise StoreError(f"database URL {shown!r}: {_AT_IN_PASSWORD}")
    return parsed


_AT_IN_PASSWORD = "more than one '@' after the password's ':': write an '@' in the password as %40"


def _at_in_password(url: str, parsed: URL) -> bool:
    return parsed.password is not None and str(url).split("://", 1)[-1].count("@") > 1


def _bad_port(url: str) -> str:
    """Why SQLAlchemy could not read a URL's port: an `@` of the password's read as the port's (none of it shown),
    or a port that is no number (shown: with one `@` at most, the password is before it)."""
    rest = str(url).split("://", 1)[-1]
    if rest.count("@") > 1:
        return _AT_IN_PASSWORD
    port = rest.rsplit("@", 1)[-1].split("/", 1)[0].split("?", 1)[0].rpartition(":")[2]
    return f"port {port!r} is not a number"


def _one_line(err: object) -> str:
    return hide_passwords(" ".join(str(err).split()))


class StoreError(ConfigError):
    """The store cannot be used as asked (bad URL, unreadable file, schema not at head); the message says which and why."""


def configured_busy_timeout_ms() -> int:
    """The busy timeout: `FLEET_DB_BUSY_TIMEOUT` seconds if set, else 30 s."""
    seconds = seconds_setting(BUSY_TIMEOUT_ENV, os.environ.get(BUSY_TIMEOUT_ENV), BUSY_TIMEOUT_MS / 1000,
                              what="the busy timeout", error=StoreError)
    return int(round(seconds * 1000))


def sqlite_writable(path: str | Path) -> bool:
    """Whether this process may write the SQLite file at `path` and make files beside it (its WAL and `-shm`):
    not on a read-only file system, nor in a folder or of a file whose permissions deny it."""
    p = Path(path)
    return os.access(p.parent, os.W_OK) and (not p.exists() or os.access(p, os.W_OK))


def sqlite_read_only_uri(path: str | Path) -> str:
    """The URI that opens the SQLite file at `path` read-only (`mode=ro`). Where nothing may write it (a read-only
    file system or folder) and no write-ahead log is waiting beside it, it is opened `immutable` too: SQLite then
    neither locks it nor needs a `-shm` file, which it could not make there."""
    p = Path(path).resolve()
    uri = f"{p.as_uri()}?mode=ro"
    if not sqlite_writable(p) and not Path(f"{p}-wal").exists():
        uri += "&immutable=1"
    return uri


def make_engine(url: str = DEFAULT_URL, *, busy_timeout_ms: int | None = None, read_only: bool = False) -> Engine:
    """An engine for `url`, with the SQLite pragmas above and explicit BEGIN (pysqlite's own is unreliable).
    The busy timeout is `busy_timeout_ms`, else `FLEET_DB_BUSY_TIMEOUT`, else 30 s. `read_only`: the database
    refuses every write of this engine's connections (SQLite's `query_only`, PostgreSQL's read-only transactions).
    A SQLite file this process may not write (itself, or its folder, or the file system read-only) is opened
    read-only (`sqlite_read_only_uri`): a store there is read, and a write to it is refused as read-only."""
    if busy_timeout_ms is None:
        busy_timeout_ms = configured_busy_timeout_ms()
    parsed = parse_url(url)
    kwargs: dict = {}
    memory = parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")
    if parsed.get_backend_name() == "sqlite" and not memory and "uri" not in parsed.query:
        folder = Path(parsed.database).parent
        if not folder.is_dir():  # SQLite would say only "unable to open database file", and only when first used
            raise StoreError(f"database {shown_url(url)!r}: no folder {str(folder)!r} to hold it (nothing was created)")
    if memory:
        kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
    elif parsed.get_backend_name() == "sqlite" and "uri" not in parsed.query and Path(parsed.database).is_file() \
            and not sqlite_writable(parsed.database):
        # Only where it cannot be written: a read-only connection elsewhere would leave the WAL's files behind it,
        # which the last ordinary connection removes as it closes (a reader there is `query_only`, below).
        read_only, uri = True, sqlite_read_only_uri(parsed.database)
        kwargs = {"creator": lambda: sqlite3.connect(uri, uri=True, check_same_thread=False)}
    if read_only and parsed.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {**kwargs.get("connect_args", {}), "options": "-c default_transaction_read_only=on"}
    try:
        engine = create_engine(url, **kwargs)
    except ImportError as err:
        extra = " (in the checkout: pip install -e '.[postgres]')" if parsed.get_backend_name() == "postgresql" else ""
        raise StoreError(f"database {shown_url(url)!r}: its driver is not installed: {_one_line(err)}{extra}") from None
    except (ArgumentError, SQLAlchemyError) as err:
        raise StoreError(f"database URL {shown_url(url)!r}: {_one_line(err)}") from None
    if engine.dialect.name == "sqlite":
        _sqlite_events(engine, busy_timeout_ms, wal=not memory and not read_only, read_only=read_only)
    return engine


def _sqlite_events(engine: Engine, busy_timeout_ms: int, wal: bool, read_only: bool = False) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # noqa: ANN001
        dbapi_connection.isolation_level = None  # transactions begin where SQLAlchemy says, below
        cur = dbapi_connection.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if wal:
            _switch_to_wal(cur, busy_timeout_ms)
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA temp_store = MEMORY")
        # A 64 MB page cache (default 2 MB): a batch inserts at every card's place in the sample key,
        # and keeping those pages cached cut the insert's CPU time by 10-20% at a million samples.
        cur.execute("PRAGMA cache_size = -65536")
        if read_only:
            cur.execute("PRAGMA query_only = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # noqa: ANN001
        conn.exec_driver_sql(conn.get_execution_options().get(_BEGIN_OPTION, "BEGIN"))


_BEGIN_OPTION = "fleet_sqlite_begin"


def _switch_to_wal(cur, busy_timeout_ms: int) -> None:  # noqa: ANN001
    """`PRAGMA journal_mode = WAL`, waiting for a lock as long as the busy timeout allows.

    SQLite answers a switch that meets another connection's lock with SQLITE_BUSY at once, without the busy
    handler: two processes opening a new store together (one switching while the other creates the schema)
    failed with "database is locked" well inside the timeout. So the wait is here: retried, with a growing
    pause, until the busy timeout has passed. A store already in WAL answers at once."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    pause = 0.001
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:
            left = deadline - time.monotonic()
            if _sqlite_code(err) not in LOCK_CODES or left <= 0:
                raise
        time.sleep(min(pause, left))
        pause = min(2 * pause, 0.05)


@contextmanager
def _write_transaction(conn):  # noqa: ANN001
    """A transaction holding the write lock from its first statement (`BEGIN IMMEDIATE` on SQLite, waiting under
    the busy timeout), so what it reads stays true until it commits: nobody else can write in between."""
    if conn.dialect.name == "sqlite":
        conn.execution_options(**{_BEGIN_OPTION: "BEGIN IMMEDIATE"})
    with conn.begin():
        yield conn


MIGRATION_LOCK_KEY = 0x666C656574  # "fleet": the advisory lock every schema change on PostgreSQL waits on


@contextmanager
def _migration_transaction(conn):  # noqa: ANN001
    """A write transaction that schema changes take turns in. On SQLite the write lock does it; PostgreSQL's
    transactional DDL does not keep two first uses from both creating `alembic_version` (one fails on a duplicate
    type), so there the transaction first waits on an advisory lock, held until it commits."""
    with _write_transaction(conn):
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        yield conn


def alembic_config(url: str, connection=None):  # noqa: ANN001
    """An Alembic Config pointing at the project's script folder, with the URL (or an open connection) passed in code."""
    from alembic.config import Config

    if not (ALEMBIC_DIR / "env.py").is_file():
        raise StoreError(f"the migration scripts are not at {ALEMBIC_DIR} (install the project from its source tree)")
    cfg = Config()
    cfg.set_main_option("script_location", str(ALEMBIC_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config(DEFAULT_URL)).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The database's Alembic revision, or None for a database Alembic has never touched."""
    from alembic.runtime.migration import MigrationContext

    with _opened(engine) as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(url: str = DEFAULT_URL, revision: str = "head", engine: Engine | None = None) -> str | None:
    """Bring the database at `url` to `revision` (Alembic's upgrade) in one transaction under the write lock, so
    two upgrades at once run one after the other (the second finds nothing to do); returns the revision it ends at."""
    from alembic import command

    engine = engine or make_engine(url)
    with _opened(engine) as conn, _migration_transaction(conn):
        command.upgrade(alembic_config(url, conn), revision)
    return current_revision(engine)


def ensure_schema(engine: Engine, url: str) -> None:
    """Create the schema in a new, empty database; refuse one at an older revision (that is `fleet db upgrade`'s job).

    The schema is made under the write lock, after looking again inside it: of processes opening a new store at
    once, the first makes it and the others, waiting their turn, find it made."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    current = current_revision(engine)
    head = head_revision()
    if current is None:
        with _opened(engine) as conn, _migration_transaction(conn):
            current = MigrationContext.configure(conn).get_current_revision()
            if current is None:
                tables = inspect(conn).get_table_names()
                if tables:
                    raise StoreError(f"database {shown_url(url)!r} has tables ({', '.join(sorted(tables)[:5])}) but no fleet schema revision")
                command.upgrade(alembic_config(url, conn), "head")
                current = head
    if current != head:
        shown = shown_url(url)
        raise StoreError(f"database {shown!r} is at schema revision {current}, this fleet needs {head}: run `fleet db upgrade --db {shown}`")


class SqlMigrations:
    """`storage.interfaces.Migrations` on one engine: its revision, this fleet's, and the upgrade (above)."""

    def __init__(self, engine: Engine):
        self._engine = engine

    def revision(self) -> str | None:
        return current_revision(self._engine)

    def head(self) -> str:
        return head_revision()

    def upgrade(self, revision: str = "head") -> str | None:
        return upgrade(self._engine.url.render_as_string(hide_password=False), revision, engine=self._engine)


class _opened:
    """`engine.connect()` that turns a database that cannot be opened into a StoreError naming it."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.conn = None

    def __enter__(self):
        try:
            self.conn = self.engine.connect()
        except DBAPIError as err:
            if is_run_time_failure(err):
                raise  # locked, read-only, full: the database is fine, this write was refused
            raise StoreError(f"database {self.engine.url.render_as_string(hide_password=True)!r}: {_one_line(err.orig)}") from None
        return self.conn

    def __exit__(self, *exc):
        self.conn.close()
        return False


def _driver_error(err: BaseException) -> BaseException:
    orig = getattr(err, "orig", None)
    return orig if isinstance(orig, BaseException) else err


def _sqlite_code(err: BaseException) -> int | None:
    code = getattr(_driver_error(err), "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def is_run_time_failure(err: BaseException) -> bool:
    """A refused write (locked past the busy timeout, read-only, disk full, I/O), as against a database that cannot
    be used at all. Told by SQLite's result code; other drivers' failures at connect are taken as the latter."""
    return _sqlite_code(err) in RUN_TIME_CODES


def _is_database_error(err: BaseException) -> bool:
    if isinstance(err, (SQLAlchemyError, sqlite3.Error)):
        return True
    # Drivers used through their own cursor (the bulk inserts) raise their DB-API errors unwrapped.
    top = type(err).__module__.split(".")[0]
    base = getattr(sys.modules.get(top), "Error", None) if top in ("psycopg", "psycopg2", "pg8000", "pymysql", "MySQLdb") else None
    return isinstance(base, type) and isinstance(err, base)


def failure_reason(err: BaseException) -> str | None:
    """The one line of a database failure at run time (`database: ...`), or None if `err` is not one. A
    `StoreError` is bad input, not a failure at run time, and gives None."""
    if isinstance(err, StoreError) or not _is_database_error(err):
        return None
    orig = _driver_error(err)
    reason = _one_line(orig) or type(orig).__name__
    if _sqlite_code(err) == READONLY_CODE:
        reason = f"read-only: the store refused a write ({reason})"
    if _sqlite_code(err) in LOCK_CODES:
        try:
            timeout_s = configured_busy_timeout_ms() / 1000
        except StoreError:
            timeout_s = BUSY_TIMEOUT_MS / 1000
        reason += f" (by another connection; the busy timeout is {timeout_s:g} s, {BUSY_TIMEOUT_ENV} sets it)"
    return f"database: {reason}"
