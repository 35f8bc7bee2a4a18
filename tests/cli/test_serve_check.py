"""`fleet serve --check`: the config validated and what it names reached, one line a check, nothing served or written.

Before it: `fleet serve --check --config FILE` was "No such option: --check", exit 2.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_prometheus import fake_prometheus

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (ROOT / "docs/serve-config.example.toml").read_text()


def fleet(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ}, timeout=120)


def config(tmp_path: Path, prometheus_url: str | None, db: str | None = None) -> Path:
    text = EXAMPLE.replace('url = "sqlite:///fleet.db"', f'url = "{db or "sqlite:///" + str(tmp_path / "fleet.db")}"')
    if prometheus_url:
        text = text.replace('prometheus_url = "http://127.0.0.1:9090"', f'prometheus_url = "{prometheus_url}"')
    else:  # no telemetry source: the source's table left out
        text = re.sub(r"\[ingest\.sources\.prometheus\]\n(?:[^\[\n#][^\n]*\n)*", "", text)
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prometheus():
    """A stand-in Prometheus on 127.0.0.1 answering every range query with an empty matrix."""
    with fake_prometheus() as prom:
        yield prom.url


def test_every_check_passes_and_nothing_is_created(tmp_path, prometheus):
    path = config(tmp_path, prometheus)
    got = fleet("serve", "--check", "--config", str(path), cwd=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    lines = got.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["ok   config", "ok   store", "ok   prometheus", "ok   actuator"]
    assert "no store yet; `fleet serve` creates it" in lines[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.toml"]  # no store made, nothing served
    assert got.stderr.strip() == "fleet serve --check: 4 checks, 0 failed; nothing served or written"


def test_an_existing_store_is_read_and_left_as_it_was(tmp_path):
    from storage.repository import open_repository

    db = tmp_path / "fleet.db"
    open_repository(f"sqlite:///{db}").engine.dispose()
    before = db.read_bytes()
    got = fleet("serve", "--check", "--config", str(config(tmp_path, None)), cwd=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "a fleet store at schema" in got.stdout and "(read only)" in got.stdout
    assert db.read_bytes() == before


def test_a_prometheus_that_refuses_fails_its_check_with_status_1(tmp_path):
    got = fleet("serve", "--check", "--config", str(config(tmp_path, f"http://127.0.0.1:{closed_port()}")), cwd=tmp_path)
    assert got.returncode == 1
    line = next(line for line in got.stdout.splitlines() if line[5:].startswith("prometheus:"))
    assert line.startswith("FAIL prometheus: ") and "cannot reach the server" in line


def test_a_prometheus_that_never_answers_fails_within_the_bound(tmp_path):
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        got = fleet("serve", "--check", "--config", str(config(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}")), cwd=tmp_path)
    assert got.returncode == 1
    line = next(line for line in got.stdout.splitlines() if line[5:].startswith("prometheus:"))
    assert line.startswith("FAIL prometheus: ")


def test_an_older_store_fails_its_check(tmp_path):
    from storage import make_engine, upgrade

    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0001", engine=make_engine(url))
    got = fleet("serve", "--check", "--config", str(config(tmp_path, None, url)), cwd=tmp_path)
    assert got.returncode == 1
    assert next(line for line in got.stdout.splitlines() if line[5:].startswith("store:")).startswith("FAIL store: ")
    assert "fleet db upgrade" in got.stdout


def test_a_bad_config_is_status_2_before_any_check(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text("[metrics]\nport = 'nine'\n")
    got = fleet("serve", "--check", "--config", str(path), cwd=tmp_path)
    assert got.returncode == 2 and got.stdout == ""
    assert got.stderr.startswith("fleet: error: config file") and "metrics.port" in got.stderr
    assert list(tmp_path.iterdir()) == [path]


def test_a_real_pool_without_a_pool_table_is_status_2(tmp_path):
    got = fleet("serve", "--check", "--db", f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
    assert got.returncode == 2 and "[pool] is missing" in got.stderr


def test_a_store_of_a_simulation_fails_the_check_of_a_real_pool(tmp_path):
    from storage.identity import StoreIdentity, claim_identity
    from storage.repository import open_repository

    url = f"sqlite:///{tmp_path / 'sim.db'}"
    engine = open_repository(url).engine
    claim_identity(engine, StoreIdentity.simulation("noise-evictor", 56, 720))
    engine.dispose()
    got = fleet("serve", "--check", "--config", str(config(tmp_path, None, url)), cwd=tmp_path)
    assert got.returncode == 1
    line = next(line for line in got.stdout.splitlines() if line[5:].startswith("store:"))
    assert line.startswith("FAIL store: ") and "holds a simulation of noise-evictor" in line and "cannot serve a real pool" in line


OLD_PLACES = """\
[[pool.classes]]
name = "flagship"
rated_tps = 6000
rent_usd_per_month = 2690

[policy]
card_class = "flagship"
forecast = "seasonal"
release_after_hours = 2

[policy.eviction]
rule = "below-median"
fraction = 0.7
breaker_share = 0.3

[storage]
url = "sqlite:///{tmp}/fleet.db"

[actuator]
kind = "command"
command = ["true"]
timeout_s = 5

[ingest]
folder = "{tmp}"
default_class = "flagship"
"""


def test_a_config_written_the_old_way_is_checked_the_same_with_one_line_per_moved_key(tmp_path):
    (tmp_path / "fleet.toml").write_text(OLD_PLACES.format(tmp=tmp_path))
    got = fleet("serve", "--check", "--config", str(tmp_path / "fleet.toml"), cwd=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    lines = got.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["ok   config", "ok   store", "ok   drop folder", "ok   actuator"]
    assert lines[3].startswith("ok   actuator: command 'true': /")
    told = sorted(line for line in got.stderr.splitlines() if line.startswith("fleet: warning:"))
    assert told == [
        "fleet: warning: actuator.command, actuator.timeout_s are deprecated: write them in [actuator.command]",
        "fleet: warning: ingest.folder is deprecated: write it in [ingest.sources.drop-folder]",
        "fleet: warning: policy.eviction.breaker_share is deprecated: write it in [policy.eviction.admissions.limits]",
        "fleet: warning: policy.eviction.fraction is deprecated: write it in [policy.eviction.rules.below-median]",
        "fleet: warning: policy.release_after_hours is deprecated: write it in [policy.hystereses.release-after]",
    ]
