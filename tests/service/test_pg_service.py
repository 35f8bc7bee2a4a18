"""The service's key scenarios of `tests/service/test_service.py` on PostgreSQL: the same months as replay's.

The in-process scenarios are that module's own test functions, run with its `open_repository` pointed at a new
PostgreSQL database (so the assertions are written once); the served noise-evictor month is `fleet serve` as a
process against PostgreSQL, checked by the same functions as the SQLite month. Skipped without a PostgreSQL server
(`FLEET_TEST_PG_URL` or `--pg-url`).
"""

from __future__ import annotations

import pytest

from fleet.presets import load_preset, replay_scenario
from storage.repository import open_repository
from tests.service import test_service as on_sqlite
from tests.service.serving import Served, value, wait_for

SKIP = "PostgreSQL: no server (FLEET_TEST_PG_URL or --pg-url)"


@pytest.fixture
def on_postgres(pg_server, monkeypatch):
    """`test_service`'s stores opened on one new PostgreSQL database for the test, whatever SQLite URL it names."""
    if pg_server is None:
        pytest.skip(SKIP)
    url = pg_server.create()
    monkeypatch.setattr(on_sqlite, "open_repository", lambda _sqlite_url: open_repository(url))
    yield url
    engine = open_repository(url).engine
    with engine.connect() as conn:  # the month was served into PostgreSQL, not beside it
        billed = conn.exec_driver_sql("SELECT COUNT(*) FROM service_hours").scalar_one()
    engine.dispose()
    pg_server.drop(url)
    assert billed > 0


def test_tiny_month_in_process_matches_replay(on_postgres, tmp_path):
    on_sqlite.test_tiny_month_in_process_matches_replay(tmp_path)


def test_hysteresis_in_the_service_is_replays(on_postgres, tmp_path):
    on_sqlite.test_hysteresis_in_the_service_is_replays(tmp_path)


def test_circuit_breaker_opens_on_a_telemetry_fault_and_says_so(on_postgres, tmp_path):
    on_sqlite.test_circuit_breaker_opens_on_a_telemetry_fault_and_says_so(tmp_path)


@pytest.mark.parametrize("overrides", [['policy.score="dip-aware"', 'policy.card_class="any"']], ids=["dip-aware, any class, evicting"])
def test_the_service_serves_replays_month_with_every_plug_in(on_postgres, tmp_path, overrides):
    on_sqlite.test_the_service_serves_replays_month_with_every_plug_in(tmp_path, overrides)


@pytest.fixture(scope="module")
def noise_month(pg_module_databases, tmp_path_factory):
    """The noise evictor's month served on a fast clock into PostgreSQL, as `test_service.noise_month` into SQLite."""
    work = tmp_path_factory.mktemp("serve-pg")
    db = pg_module_databases.create()
    served = Served(["--simulate", "noise-evictor", "--speed", "1e7", "--db", db, "--metrics-port", "0"], work)
    try:
        fams = wait_for(lambda: (f := served.families()) and value(f, "fleet_month_hours_billed") == 720 and f, 300,
                        "the month to be billed", every_s=0.5)
        rc = served.terminate()
    finally:
        served.kill()
    r = replay_scenario(load_preset("noise-evictor").resolve())
    return {"db": db, "families": fams, "rc": rc, "stderr": served.stderr(), "replay": r, "work": work}


def test_served_month_stops_cleanly(noise_month):
    on_sqlite.test_sigterm_stops_cleanly(noise_month)


def test_served_journal_has_replays_evictions(noise_month):
    on_sqlite.test_journal_has_replays_evictions(noise_month)


def test_served_store_has_replays_bill_and_run_sets(noise_month):
    on_sqlite.test_store_has_replays_bill_and_run_sets(noise_month)


def test_the_month_under_a_promise_is_replays(on_postgres, tmp_path, monkeypatch):
    """chat-latency served into PostgreSQL: its goodput, ideal under the promise and four checks are replay's."""
    from tests.service import test_promise_month as promise

    monkeypatch.setattr(promise, "open_repository", lambda _sqlite_url: open_repository(on_postgres))
    svc, _db, figures = promise.serve_month(tmp_path, fix=False)
    promise.test_the_served_month_is_replays_under_the_promise({"replay": figures, "snapshot": svc.metrics_job()})
