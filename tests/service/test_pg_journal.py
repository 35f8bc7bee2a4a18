"""The journal's key scenarios of `tests/service/test_journal.py` on PostgreSQL: written once, acted on once, a
SIGKILL between journal and act included. Skipped without a PostgreSQL server (`FLEET_TEST_PG_URL` or `--pg-url`)."""

from __future__ import annotations

import pytest

from fleet.presets import load_preset, replay_scenario
from fleet.service.journal import ACTIONS
from storage.repository import open_repository
from storage.service_store import ServiceStore
from tests.service import test_journal as on_sqlite
from tests.service.serving import TINY_PRESET, Served, wait_for

SKIP = "PostgreSQL: no server (FLEET_TEST_PG_URL or --pg-url)"


@pytest.fixture
def pg_url(pg_server):
    if pg_server is None:
        pytest.skip(SKIP)
    url = pg_server.create()
    yield url
    pg_server.drop(url)


@pytest.fixture
def on_postgres(pg_url, monkeypatch):
    """`test_journal`'s in-memory stores made on a new PostgreSQL database instead."""
    monkeypatch.setattr(on_sqlite, "sqlite_memory_repository", lambda: open_repository(pg_url))
    return pg_url


def test_journal_hour_is_written_once_and_acts_in_order(on_postgres):
    on_sqlite.test_journal_hour_is_written_once_and_acts_in_order()
    assert len(ServiceStore(open_repository(on_postgres).engine).decisions()) == 3  # on PostgreSQL


def test_a_failed_action_stays_pending_without_holding_another_cards(on_postgres):
    on_sqlite.test_a_failed_action_stays_pending_without_holding_another_cards()
    assert len(ServiceStore(open_repository(on_postgres).engine).decisions()) == 3


def test_sigkill_between_journal_and_act_acts_each_decision_once(pg_url, tmp_path):
    """As on SQLite: the served tiny month, killed while its actuator carries out the first eviction, then served to
    the end by a second process; every action acted on once, none lost, the eviction budget held."""
    (tmp_path / "tiny.toml").write_text(TINY_PRESET)
    (tmp_path / "actuator.sh").write_text(on_sqlite.ACTUATOR)
    (tmp_path / "fleet.toml").write_text(f'[actuator]\nkind = "command"\ncommand = ["/bin/sh", "{tmp_path / "actuator.sh"}", "{tmp_path}"]\n')
    args = ["--config", str(tmp_path / "fleet.toml"), "--simulate", str(tmp_path / "tiny.toml"), "--speed", "1e7",
            "--db", pg_url, "--metrics-port", "0"]
    first = Served(args, tmp_path, "first")
    try:
        wait_for(lambda: (tmp_path / "blocked").exists(), 60, "the actuator to block on the first eviction")
        store = ServiceStore(open_repository(pg_url).engine)
        blocked_key = (tmp_path / "blocked").read_text()
        assert blocked_key in {r.key for r in store.unacted()}  # journaled before acting
        acted_before = (tmp_path / "acted.log").read_text().split()
    finally:
        first.kill()
    assert first.proc.returncode == -9 and blocked_key not in acted_before

    second = Served(args + ["--exit-when-done"], tmp_path, "second")
    assert second.proc.wait(180) == 0, second.stderr()
    acted = (tmp_path / "acted.log").read_text().split()
    assert len(acted) == len(set(acted)), "a decision was acted on twice"
    journal = store.decisions()
    assert sorted(acted) == sorted(r.key for r in journal if r.kind in ACTIONS)
    assert all(r.acted_ts is not None for r in journal)
    assert acted_before == acted[: len(acted_before)]
    r = replay_scenario(load_preset(str(tmp_path / "tiny.toml")).resolve())
    evictions = store.decisions(kinds=["evict"])
    assert [row.card_key for row in evictions] == [str(r.month.card_ids[e.card]) for e in r.evictions]
    assert len(evictions) == r.figures["eviction_budget"] == 3
