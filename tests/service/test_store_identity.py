"""A store knows what it holds: a serve of another simulation, seed or pool is refused in one line, nothing written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import text

from storage import make_engine
from storage.identity import StoreIdentity, read_identity
from tests.cli.served_month import serve_tiny_month
from tests.service.real_pool import FLAGSHIP_POOL
from tests.service.serving import FLEET

TABLES = ("card_classes", "cards", "ingest_runs", "telemetry_samples", "decisions", "service_hours", "store_meta", "leases")

POOL_CONFIG = FLAGSHIP_POOL


def counts(url: str) -> dict[str, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {t: int(conn.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one()) for t in TABLES}
    finally:
        engine.dispose()


def serve_cli(capsys, *args) -> tuple[int, str]:
    """`fleet serve ARGS` through `main` in this process: (exit status, stderr)."""
    from fleet.cli.app import main

    capsys.readouterr()
    old = sys.argv
    sys.argv = ["fleet", "serve", *args]
    try:
        main()
        code = 0
    except SystemExit as done:
        code = done.code or 0
    finally:
        sys.argv = old
    return code, capsys.readouterr().err


@pytest.fixture
def tiny_store(tmp_path):
    """A store that served the tiny preset's month (jobs stepped in process)."""
    month = serve_tiny_month(tmp_path)
    return {"url": month.url, "preset": str(month.preset), "tmp": tmp_path}


def test_the_first_serve_records_what_the_store_holds(tiny_store):
    assert read_identity(make_engine(tiny_store["url"])) == StoreIdentity.simulation("tiny-evictor", 5, 96)


@pytest.mark.parametrize(
    "args, wanted",
    [
        (["--simulate", "golden-idler"], "a simulation of golden-idler (seed"),
        (["--simulate", "{preset}", "--seed", "6"], "a simulation of tiny-evictor (seed 6, 96 hours)"),
    ],
    ids=["another preset", "another seed"],
)
def test_another_simulation_is_refused_naming_both(tiny_store, capsys, args, wanted):
    before = counts(tiny_store["url"])
    args = [a.format(preset=tiny_store["preset"]) for a in args]
    code, err = serve_cli(capsys, *args, "--speed", "1e7", "--exit-when-done", "--db", tiny_store["url"], "--metrics-port", "0")
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "holds a simulation of tiny-evictor (seed 5, 96 hours)" in err and wanted in err
    assert counts(tiny_store["url"]) == before  # nothing written


def test_the_same_simulation_resumes(tiny_store, capsys):
    code, err = serve_cli(capsys, "--simulate", tiny_store["preset"], "--speed", "1e7", "--exit-when-done",
                          "--db", tiny_store["url"], "--metrics-port", "0")
    assert code == 0, err
    assert "96 hours of the month" in err and "3 evictions" in err


def test_a_store_from_before_the_identity_was_recorded_says_what_it_holds(tiny_store, capsys):
    """No identity row (a store of an older revision, upgraded): its simulated feed's runs name the preset."""
    engine = make_engine(tiny_store["url"])
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM store_meta"))
    assert read_identity(engine) == StoreIdentity("simulation", "tiny-evictor")
    code, err = serve_cli(capsys, "--simulate", "golden-idler", "--speed", "1e7", "--exit-when-done",
                          "--db", tiny_store["url"], "--metrics-port", "0")
    assert code == 2 and "holds a simulation of tiny-evictor;" in err
    code, err = serve_cli(capsys, "--simulate", tiny_store["preset"], "--speed", "1e7", "--exit-when-done",
                          "--db", tiny_store["url"], "--metrics-port", "0")
    assert code == 0, err
    assert read_identity(engine) == StoreIdentity.simulation("tiny-evictor", 5, 96)  # recorded in full now


def test_a_real_pool_is_refused_on_a_simulations_store(tiny_store):
    """A process, with a timeout: were it not refused, a real pool's serve would run until stopped."""
    (tiny_store["tmp"] / "pool.toml").write_text(POOL_CONFIG)
    before = counts(tiny_store["url"])
    out = subprocess.run(FLEET + ["serve", "--config", str(tiny_store["tmp"] / "pool.toml"), "--db", tiny_store["url"],
                                  "--metrics-port", "0"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"fleet: error: database {tiny_store['url']!r} holds a simulation of tiny-evictor (seed 5, 96 hours); "
        "it cannot serve a real pool (give another --db)"
    ]
    assert counts(tiny_store["url"]) == before


def test_a_simulation_is_refused_on_a_real_pools_store(tmp_path, capsys):
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import WallClock
    from storage.repository import open_repository

    (tmp_path / "pool.toml").write_text(POOL_CONFIG)
    url = f"sqlite:///{tmp_path / 'pool.db'}"
    Service(load_service_config(tmp_path / "pool.toml"), open_repository(url), WallClock())
    assert read_identity(make_engine(url)) == StoreIdentity.pool()
    before = counts(url)
    code, err = serve_cli(capsys, "--simulate", "noise-evictor", "--speed", "1e7", "--exit-when-done", "--db", url,
                          "--metrics-port", "0")
    assert code == 2 and "holds a real pool; it cannot serve a simulation of noise-evictor (seed 56, 720 hours)" in err
    assert counts(url) == before


def fleet_cli(capsys, *args) -> tuple[int, str, str]:
    from tests.service.test_service import run_cli

    return run_cli(capsys, *args)


@pytest.mark.parametrize(
    "make_args, writing",
    [
        (lambda tmp: ["ingest", str(tmp / "real.csv")], "a real pool's telemetry"),
        (lambda tmp: ["ingest", "--watch", str(tmp / "drop"), "--once"], "a real pool's telemetry"),
        (lambda tmp: ["ingest", "--demand", str(tmp / "real.demand.csv")], "a real pool's measured demand"),
        (lambda tmp: ["card", "retire", "flagship-00001", "--reason", "gone"], "an operator's retirement of a card"),
    ],
    ids=["ingest", "ingest --watch", "ingest --demand", "card retire"],
)
def test_every_writer_refuses_a_simulations_store(tiny_store, capsys, make_args, writing):
    """A real pool's writers on a simulation's store: one line, exit status 2, nothing written (the file stays)."""
    tmp = tiny_store["tmp"]
    (tmp / "real.csv").write_text("card_id,ts,tokens_per_s\ngpu-x,1767225600,5000\n")
    (tmp / "real.demand.csv").write_text("ts,demand_tps\n1767225600,10000\n")
    (tmp / "drop").mkdir(exist_ok=True)
    (tmp / "drop" / "real.csv").write_text("card_id,ts,tokens_per_s\ngpu-x,1767225600,5000\n")
    before = counts(tiny_store["url"])
    code, out, err = fleet_cli(capsys, *make_args(tmp), "--db", tiny_store["url"])
    assert code == 2, err
    assert err.strip().splitlines() == [
        f"fleet: error: database {tiny_store['url']!r} holds a simulation of tiny-evictor (seed 5, 96 hours); "
        f"it cannot take {writing} (give another --db)"
    ]
    assert counts(tiny_store["url"]) == before
    assert (tmp / "drop" / "real.csv").exists()  # not taken


def test_a_real_pools_store_takes_an_ingest(tmp_path, capsys):
    (tmp_path / "real.csv").write_text("card_id,ts,tokens_per_s\ngpu-x,1767225600,5000\n")
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert fleet_cli(capsys, "ingest", str(tmp_path / "real.csv"), "--db", url, "--class", "flagship")[0] == 0
    assert fleet_cli(capsys, "ingest", str(tmp_path / "real.csv"), "--db", url, "--class", "flagship")[0] == 0  # again
    assert read_identity(make_engine(url)) == StoreIdentity.pool()


def test_a_copy_into_a_store_of_another_identity_is_refused_by_name(tiny_store, tmp_path, capsys):
    (tmp_path / "real.csv").write_text("card_id,ts,tokens_per_s\ngpu-x,1767225600,5000\n")
    real = f"sqlite:///{tmp_path / 'r.db'}"
    assert fleet_cli(capsys, "ingest", str(tmp_path / "real.csv"), "--db", real, "--class", "flagship")[0] == 0
    before = counts(real)
    code, out, err = fleet_cli(capsys, "db", "copy", "--from", tiny_store["url"], "--to", real)
    assert code == 2 and err.strip().splitlines() == [
        f"fleet: error: database {real!r} holds a real pool; it cannot take a copy of a simulation of tiny-evictor "
        "(seed 5, 96 hours) (give another --to)"
    ]
    assert counts(real) == before
