"""`open_store`, the one way into a database: a new one made only when asked, an old schema only when asked, on
SQLite and PostgreSQL alike."""

from __future__ import annotations

import pytest

from fleet.core.units import NO_END_TS
from storage import StoreError, open_store
from storage.identity import StoreIdentity
from storage.values import ClassSpec, JournalEntry, Kind

T0 = 1_767_225_600  # 2026-01-01T00:00Z


def test_a_reader_is_refused_where_no_store_is_and_nothing_is_made(tmp_path):
    missing = tmp_path / "typo.db"
    for any_revision in (False, True):
        with pytest.raises(StoreError, match="no such file; no store there"):
            open_store(f"sqlite:///{missing}", any_revision=any_revision)
    assert not missing.exists()


def test_create_gives_a_new_database_the_schema_and_a_reader_then_opens_it(store_url):
    made = open_store(store_url, create=True)
    assert made.migrations.revision() == made.migrations.head()
    made.telemetry.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    made.close()
    read = open_store(store_url)
    assert set(read.telemetry.classes()) == {"flagship"}
    read.close()


def test_an_older_schema_is_opened_only_to_be_upgraded(store_url):
    old = open_store(store_url, create=True, any_revision=True)  # no schema made: the upgrade's to make
    assert old.migrations.upgrade("0001") == "0001"
    old.close()
    for create in (False, True):
        with pytest.raises(StoreError, match=r"is at schema revision 0001, .* run `fleet db upgrade"):
            open_store(store_url, create=create)
    again = open_store(store_url, any_revision=True)
    assert again.migrations.revision() == "0001"
    assert again.migrations.upgrade() == again.migrations.head()
    again.close()
    assert open_store(store_url).migrations.revision() == open_store(store_url).migrations.head()


def test_the_roles_write_and_read_one_database(store_url):
    """The reconcile role's retirement is the journal's record; the identity claimed once; the lease taken once."""
    store = open_store(store_url, create=True)
    store.telemetry.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    store.telemetry.declare_cards({"gpu-1": "flagship", "gpu-2": "flagship"}, T0)
    store.journal.journal_hour(T0, [JournalEntry(f"{T0}:size", T0, Kind.SIZE, "", acted=True)],
                               {"gpu-1": "flagship", "gpu-2": "flagship"}, [], [])
    assert store.reconcile.retire_card("gpu-2", T0 + 60, "burnt out", "ops")
    assert [r.card_key for r in store.journal.decisions(kinds=[Kind.RETIRE])] == ["gpu-2"]
    assert store.journal.run_set_at(T0 + 3600) == {"gpu-1"}
    assert store.reconcile.warm_since(T0 + 3600) == {"gpu-1": T0}
    assert store.identity.claim(StoreIdentity.pool()) == StoreIdentity.pool()
    with pytest.raises(StoreError, match="holds a real pool; it cannot take a copy"):
        store.identity.refuse_other(StoreIdentity.simulation("tiny-evictor", 5, 96), "a copy")
    other = open_store(store_url)
    assert other.leases.try_acquire("fleet", "a", 10.0, 15.0)[0]
    assert not store.leases.try_acquire("fleet", "b", 11.0, 15.0)[0]
    assert "password" not in store.shown_url and store.shown_url.split(":")[0] in ("sqlite", "postgresql+psycopg")
    other.close()
    store.close()


def test_a_store_opened_read_only_reads_and_refuses_every_write(store_url):
    """`fleet plan`'s way in: the database itself refuses a write (SQLite's query_only, PostgreSQL's read-only
    transactions), whichever role tries it, and the reads go on."""
    from sqlalchemy.exc import DBAPIError

    made = open_store(store_url, create=True)
    made.telemetry.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    made.close()
    with pytest.raises(ValueError, match="not created"):
        open_store(store_url, create=True, read_only=True)
    read = open_store(store_url, read_only=True)
    assert set(read.telemetry.classes()) == {"flagship"}
    writes = [lambda: read.telemetry.declare_cards({"gpu-1": "flagship"}, T0),
              lambda: read.journal.journal_hour(T0, [JournalEntry(f"{T0}:size", T0, Kind.SIZE, "", acted=True)], {}, [], []),
              lambda: read.identity.claim(StoreIdentity.pool())]
    for write in writes:
        with pytest.raises(DBAPIError, match="(?i)read.only|readonly"):
            write()
    assert read.telemetry.cards() == {} and read.journal.last_decided_ts(0, NO_END_TS) is None
    read.close()


def test_a_command_asks_storage_which_file_a_url_names():
    """`sqlite_file`: the file of a SQLite URL (a URI filename too), None for another backend or a bad URL, so a
    command that must not create a file asks storage rather than parsing the URL itself."""
    from storage.existing import sqlite_file

    assert sqlite_file("sqlite:///stores/fleet.db") == "stores/fleet.db"
    assert sqlite_file("sqlite:///file:/srv/s.db?mode=ro&uri=true") == "/srv/s.db"
    assert sqlite_file("sqlite://") == ""
    assert sqlite_file("postgresql+psycopg://fleet@db/fleet") is None and sqlite_file("not a url") is None
