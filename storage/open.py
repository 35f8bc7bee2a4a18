"""The one way into a store: `open_store(url)` gives a database in every role, and only `storage/` holds its engine.

The shell asks a store for telemetry, the journal, the lease, what it holds, the
reconcile check's reads and the schema, each through its protocol in
`storage.interfaces`; the SQLAlchemy engine they share stays here, so a command,
a job or a test hook never builds a store class of its own nor reaches for an
engine. How the database is opened is said once, by two choices:

- `create`: a new, empty database is given the schema (`fleet serve`, `fleet
  ingest`); without it a store that is not there, holds no fleet schema or holds an
  older one is refused (`storage.existing`), nothing created: a reader's way in,
  where a mistyped path must not become an empty store;
- `any_revision`: the schema is left as found, for `fleet db upgrade` and `fleet db
  current`, whose business an older schema is;
- `read_only`: the database refuses every write (`fleet plan`, which must leave the
  store as it found it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from storage import DEFAULT_URL

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from storage.interfaces import Store, TelemetryStore


class SqlStore:
    """`storage.interfaces.Store` on one SQLAlchemy engine: each role's implementation over it."""

    def __init__(self, engine: Engine, telemetry: TelemetryStore | None = None):
        from storage.cards import SqlReconcileStore
        from storage.db import SqlMigrations
        from storage.identity import SqlIdentity
        from storage.lease import LeaseStore
        from storage.repository import SqlRepository
        from storage.service_store import ServiceStore

        self._engine = engine
        self.telemetry = telemetry if telemetry is not None else SqlRepository(engine)
        self.journal = ServiceStore(engine)
        self.leases = LeaseStore(engine)
        self.identity = SqlIdentity(engine)
        self.reconcile = SqlReconcileStore(engine)
        self.migrations = SqlMigrations(engine)
        self.shown_url = engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        self._engine.dispose()


def open_store(url: str = DEFAULT_URL, *, create: bool = False, any_revision: bool = False, read_only: bool = False) -> Store:
    """The store at `url` in every role. A database that cannot be used as asked is a `StoreError` naming the URL
    (password masked): without `create`, one that is not a fleet store; without `any_revision`, one at another
    schema than this fleet's. With both, the database is only opened (a SQLite file is made when first written)."""
    from storage.db import ensure_schema, make_engine
    from storage.existing import existing_revision, open_existing

    if read_only and create:
        raise ValueError("a store opened read only is not created")
    if not create:
        if any_revision:
            existing_revision(url)  # refused, nothing created, if no store is there
            return SqlStore(make_engine(url, read_only=read_only))
        return SqlStore(open_existing(url, read_only=read_only))
    engine = make_engine(url)
    if not any_revision:
        ensure_schema(engine, url)
    return SqlStore(engine)


def as_store(store: Store | TelemetryStore) -> Store:
    """`store` in every role: a `Store` as it is, or the telemetry store of one database (`open_repository`'s) with
    its other roles opened over the same engine, so a caller that opened only the telemetry side is served alike."""
    if isinstance(store, SqlStore):
        return store
    return SqlStore(store.engine, telemetry=store)


def each_commit(telemetry: TelemetryStore, callback: Callable[[], None]) -> Callable[[], None]:
    """Call `callback` as each transaction of `telemetry`'s database commits, just before its COMMIT is sent (the
    ingest crash tests' hook); returns what undoes it."""
    from sqlalchemy import event

    engine = telemetry.engine

    def on_commit(_conn) -> None:  # noqa: ANN001
        callback()

    event.listen(engine, "commit", on_commit)
    return lambda: event.remove(engine, "commit", on_commit)
