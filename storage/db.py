"""Engines and schema: SQLite pragmas, the default database, and Alembic run from code.

The default store is `sqlite:///fleet.db`, a file in the working folder; any
SQLAlchemy URL works. On SQLite every connection gets, in this order: a busy
timeout (so a writer waits for another instead of failing, and so the switch to
WAL itself waits for a lock), WAL journaling (readers never block the writer),
`synchronous=NORMAL` (safe against a killed process; WAL keeps the file whole),
and foreign keys on (a 64 MB page cache as well). Alembic's script folder is found next to this package, so
`fleet db upgrade` works from any working directory.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from fleet.core.errors import ConfigError
from storage import DEFAULT_URL

BUSY_TIMEOUT_MS = 30_000
ALEMBIC_DIR = Path(__file__).resolve().parent.parent / "alembic"


class StoreError(ConfigError):
    """The store cannot be used as asked (bad URL, unreadable file, schema not at head); the message says which and why."""


def make_engine(url: str = DEFAULT_URL, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> Engine:
    """An engine for `url`, with the SQLite pragmas above and explicit BEGIN (pysqlite's own is unreliable)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(f"database URL {url!r}: not a SQLAlchemy URL (e.g. sqlite:///fleet.db)") from None
    kwargs: dict = {}
    memory = parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")
    if memory:
        kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
    try:
        engine = create_engine(url, **kwargs)
    except (ArgumentError, ImportError, SQLAlchemyError) as err:
        raise StoreError(f"database URL {url!r}: {err}") from None
    if engine.dialect.name == "sqlite":
        _sqlite_events(engine, busy_timeout_ms, wal=not memory)
    return engine


def _sqlite_events(engine: Engine, busy_timeout_ms: int, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # noqa: ANN001
        dbapi_connection.isolation_level = None  # transactions begin where SQLAlchemy says, below
        cur = dbapi_connection.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")  # before WAL: the switch itself may wait
        if wal:
            cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA temp_store = MEMORY")
        # A 64 MB page cache (default 2 MB): a batch inserts at every card's place in the sample key,
        # and keeping those pages cached cut the insert's CPU time by 10-20% at a million samples.
        cur.execute("PRAGMA cache_size = -65536")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # noqa: ANN001
        conn.exec_driver_sql("BEGIN")


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
    """Bring the database at `url` to `revision` (Alembic's upgrade); returns the revision it ends at."""
    from alembic import command

    engine = engine or make_engine(url)
    with _opened(engine) as conn:
        with conn.begin():
            command.upgrade(alembic_config(url, conn), revision)
    return current_revision(engine)


def ensure_schema(engine: Engine, url: str) -> None:
    """Create the schema in a new, empty database; refuse one at an older revision (that is `fleet db upgrade`'s job)."""
    current = current_revision(engine)
    head = head_revision()
    if current == head:
        return
    if current is None:
        with _opened(engine) as conn:
            tables = inspect(conn).get_table_names()
        if tables:
            raise StoreError(f"database {url!r} has tables ({', '.join(sorted(tables)[:5])}) but no fleet schema revision")
        upgrade(url, engine=engine)
        return
    raise StoreError(f"database {url!r} is at schema revision {current}, this fleet needs {head}: run `fleet db upgrade --db {url}`")


class _opened:
    """`engine.connect()` that turns a database that cannot be opened into a StoreError naming it."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.conn = None

    def __enter__(self):
        try:
            self.conn = self.engine.connect()
        except DBAPIError as err:
            raise StoreError(f"database {self.engine.url.render_as_string(hide_password=True)!r}: {err.orig}") from None
        return self.conn

    def __exit__(self, *exc):
        self.conn.close()
        return False
