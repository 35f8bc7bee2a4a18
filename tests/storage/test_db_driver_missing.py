"""A URL whose driver is not installed is one line naming the database (password masked) and the extra to install."""

import pytest

import storage.db as db
from storage.db import StoreError, make_engine


def test_a_missing_postgresql_driver_names_the_extra(monkeypatch):
    def no_driver(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'psycopg'")

    monkeypatch.setattr(db, "create_engine", no_driver)
    with pytest.raises(StoreError) as err:
        make_engine("postgresql+psycopg://fleet:hunter2@127.0.0.1:1/x")
    assert str(err.value) == ("database 'postgresql+psycopg://fleet:***@127.0.0.1:1/x': its driver is not installed: "
                              "No module named 'psycopg' (in the checkout: pip install -e '.[postgres]')")
