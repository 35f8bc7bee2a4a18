"""The store tests on both backends: SQLite always, PostgreSQL when a server is given.

`FLEET_TEST_PG_URL` (or `--pg-url`) names a PostgreSQL server, e.g.
`postgresql+psycopg://fleet:SECRET@127.0.0.1:5432/fleet`; its user must be allowed to create databases.
A test that takes `store_url`, `new_store_url` or `new_repo` runs once per backend (ids `[sqlite]`,
`[postgresql]`), and on PostgreSQL each store is a database of its own, created for the test and dropped
after it (`CREATE DATABASE` takes about 0.1 s; a schema per test would leave Alembic's version table to
share). Without a server the PostgreSQL runs are skipped, and the session's header and summary say so.

The hooks and fixtures here are imported by `tests/conftest.py`.
"""

from __future__ import annotations

import itertools
import os
from typing import Callable

import pytest

PG_URL_ENV = "FLEET_TEST_PG_URL"
BACKENDS = ("sqlite", "postgresql")
SKIP_REASON = f"PostgreSQL: no server ({PG_URL_ENV} or --pg-url)"


def pytest_addoption(parser) -> None:  # noqa: ANN001
    parser.addoption("--pg-url", default=None, metavar="URL",
                     help=f"PostgreSQL server for the store tests (default: ${PG_URL_ENV}); without one they run on SQLite only.")


def pg_server_url(config) -> str | None:  # noqa: ANN001
    return config.getoption("--pg-url", default=None) or os.environ.get(PG_URL_ENV) or None


def pytest_report_header(config) -> str:  # noqa: ANN001
    url = pg_server_url(config)
    if url is None:
        return f"store backends: sqlite only (PostgreSQL skipped: set {PG_URL_ENV} or --pg-url)"
    from storage.db import shown_url

    return f"store backends: sqlite, postgresql at {shown_url(url)}"


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if SKIP_REASON in str(getattr(r, "longrepr", ""))]
    if skipped:
        terminalreporter.write_line(
            f"PostgreSQL skipped: {len(skipped)} store tests ran on SQLite only (set {PG_URL_ENV} or --pg-url to run them on PostgreSQL)",
            yellow=True,
        )


class PgServer:
    """A PostgreSQL server the tests create databases on, one per store, and drop them after."""

    def __init__(self, url: str):
        from sqlalchemy import create_engine
        from sqlalchemy.engine import make_url

        self.url = make_url(url)
        self.admin = create_engine(self.url, isolation_level="AUTOCOMMIT", poolclass=_null_pool())
        self._names = itertools.count()

        self._template: str | None = None

    def create(self, with_schema: bool = False) -> str:
        """A new database, empty or (`with_schema`) at the newest schema; its URL, password included (the tests
        connect with it). One with the schema is a copy of a template made once a session: Alembic's upgrade of an
        empty database takes most of a second, a copy a tenth."""
        from sqlalchemy import text

        template = self._schema_template() if with_schema else "template1"
        name = f"fleet_test_{os.getpid()}_{next(self._names)}"
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
        return self.url.set(database=name).render_as_string(hide_password=False)

    def _schema_template(self) -> str:
        if self._template is None:
            from sqlalchemy import text

            from storage.db import make_engine, upgrade

            name = f"fleet_test_{os.getpid()}_template"
            with self.admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            url = self.url.set(database=name).render_as_string(hide_password=False)
            engine = make_engine(url)
            upgrade(url, engine=engine)
            engine.dispose()  # a template must have no connection open while it is copied
            self._template = name
        return self._template

    def close(self) -> None:
        if self._template is not None:
            self.drop(self.url.set(database=self._template).render_as_string(hide_password=False))
        self.admin.dispose()

    def drop(self, url: str) -> None:
        """Drop a database made by `create`, ending connections a test left open (engines not disposed)."""
        from sqlalchemy import text
        from sqlalchemy.engine import make_url

        name = make_url(url).database
        assert name and name.startswith("fleet_test_"), name
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    @property
    def password(self) -> str | None:
        return self.url.password


def _null_pool():
    from sqlalchemy.pool import NullPool

    return NullPool


@pytest.fixture(scope="session")
def pg_server(request) -> PgServer | None:
    """The PostgreSQL server given to the session, or None."""
    url = pg_server_url(request.config)
    if url is None:
        yield None
        return
    server = PgServer(url)
    try:
        with server.admin.connect():
            pass
    except Exception as err:  # noqa: BLE001 - a server that was named but cannot be reached is a failed setup
        from storage.db import hide_passwords

        pytest.exit(f"{PG_URL_ENV}: cannot connect: {hide_passwords(str(err).splitlines()[0])}", returncode=3)
    yield server
    server.close()


@pytest.fixture(params=BACKENDS)
def backend(request, pg_server) -> str:
    """The store backend of this run of the test: `sqlite`, or `postgresql` when a server is given."""
    if request.param == "postgresql" and pg_server is None:
        pytest.skip(SKIP_REASON)
    return request.param


@pytest.fixture
def new_store_url(backend, pg_server, tmp_path) -> Callable[[], str]:
    """A factory of URLs of new stores on this test's backend, empty or (`with_schema=True`) at the newest schema:
    SQLite files in `tmp_path`, or databases of their own on the PostgreSQL server (dropped after the test)."""
    made: list[str] = []
    count = itertools.count()

    def make(with_schema: bool = False) -> str:
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path / f'store-{next(count)}.db'}"
            if with_schema:
                from storage.db import upgrade

                upgrade(url)
            return url
        url = pg_server.create(with_schema)
        made.append(url)
        return url

    yield make
    for url in made:
        pg_server.drop(url)


@pytest.fixture
def store_url(new_store_url) -> str:
    """The URL of one new, empty store on this test's backend."""
    return new_store_url()


@pytest.fixture
def new_repo(backend, new_store_url):
    """A factory of new repositories on this test's backend: SQLite in memory (as `sqlite_memory_repository`),
    or a database of its own on PostgreSQL."""
    from storage import open_repository, sqlite_memory_repository

    def make():
        return sqlite_memory_repository() if backend == "sqlite" else open_repository(new_store_url(with_schema=True))

    return make


class PgDatabases:
    """Databases for module- or session-scoped fixtures on the server: made by `create`, dropped by `close`."""

    def __init__(self, server: PgServer):
        self.server = server
        self.made: list[str] = []

    def create(self, with_schema: bool = False) -> str:
        url = self.server.create(with_schema)
        self.made.append(url)
        return url

    def close(self) -> None:
        for url in self.made:
            self.server.drop(url)


@pytest.fixture(scope="module")
def pg_module_databases(pg_server):
    """Databases that live as long as a test module (for a served month shared by its tests); skipped without a server."""
    if pg_server is None:
        pytest.skip(SKIP_REASON)
    dbs = PgDatabases(pg_server)
    yield dbs
    dbs.close()
