"""The telemetry sources' registry: each source's table `[ingest.sources.NAME]` validated at its place, the sources a
config turns on, each one's `fleet serve --check` line, and the sources' keys written flat in `[ingest]` the old
way."""

from __future__ import annotations

import socket

import pytest

from fleet.core.errors import ConfigError, MovedKey
from fleet.credentials import Credentials
from fleet.ingest.drop import DropFolder, DropFolderSettings
from fleet.ingest.prometheus_source import PrometheusSettings, PrometheusSource
from fleet.ingest.sources import source_checks, source_for
from fleet.service.config import load_service_config
from tests.fake_prometheus import fake_prometheus

SECRET = "s3cret-token-value"


def config(tmp_path, text: str):
    (tmp_path / "fleet.toml").write_text(text)
    return load_service_config(tmp_path / "fleet.toml")


DROP = "[ingest.sources.drop-folder]\n"
PROM = '[ingest.sources.prometheus]\nprometheus_url = "http://127.0.0.1:9090"\n'


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("text,error", [
    (DROP + 'folder = "/tmp"\nsettle_s = -1\n', r"ingest\.sources\.drop-folder\.settle_s: Input should be greater than or equal to 0"),
    (DROP + 'settle_s = 1\n', r"ingest\.sources\.drop-folder\.folder: Field required"),
    (PROM + 'step_s = 0\n', r"ingest\.sources\.prometheus\.step_s: Input should be greater than or equal to 1"),
    ('[ingest]\nstrict = "sometimes"\n', r"ingest\.strict: Input should be a valid boolean"),
    ('[ingest]\nfoldr = "/tmp"\n', r"ingest\.foldr: unknown key"),
    ('[ingest.sources.drop-foldr]\nfolder = "/tmp"\n', r"ingest\.sources\.drop-foldr: unknown telemetry source \(known: drop-folder, prometheus"),
    (PROM + 'demand_source = "csv"\n', r"ingest\.sources\.prometheus: demand_source 'csv' reads files"),
    (PROM + 'demand_source = "query"\n', r"demand_source 'query' needs demand_query"),
    (PROM + 'demand_source = "gateway"\n', r"unknown demand source 'gateway'"),
    (PROM + 'auth = {bearer_token_env = "A", bearer_token_file = "f"}\n', r"ingest\.sources\.prometheus\.auth: .*give each secret once"),
])
def test_each_source_validates_its_own_table_at_its_place(tmp_path, text, error):
    with pytest.raises(ConfigError, match=error):
        config(tmp_path, text)


def test_every_bad_key_is_named_at_once(tmp_path):
    with pytest.raises(ConfigError) as err:
        config(tmp_path, '[ingest]\nbusy_floor = 2\nnope = 1\n' + DROP + 'folder = "/tmp"\nsettle_s = -1\n')
    assert all(key in str(err.value) for key in ("ingest.busy_floor", "ingest.sources.drop-folder.settle_s", "ingest.nope"))


def test_a_config_turns_on_the_sources_whose_tables_it_gives(tmp_path):
    assert config(tmp_path, "").ingest.telemetry_sources() == []
    cfg = config(tmp_path, f'{DROP}folder = "{tmp_path}"\n{PROM}step_s = 30\nauth = {{bearer_token_env = "PROM_TOKEN"}}\n')
    on = cfg.ingest.telemetry_sources()
    assert [type(source) for source in on] == [DropFolder, PrometheusSource]
    assert on[0].settings == DropFolderSettings(folder=str(tmp_path))
    assert on[1].settings.step_s == 30 and on[1].settings.demand_source_name == "vllm-queue"
    assert cfg.ingest.credentials() == [Credentials(bearer_token_env="PROM_TOKEN")]


def test_keys_written_flat_in_ingest_are_moved_to_their_sources_tables_with_one_line_each(tmp_path):
    old = (f'[ingest]\ndefault_class = "flagship"\nfolder = "{tmp_path}"\nprometheus_url = "http://127.0.0.1:9090"\n'
           'step_s = 30\n[ingest.auth]\nbearer_token_env = "PROM_TOKEN"\n')
    new = (f'[ingest]\ndefault_class = "flagship"\n{DROP}folder = "{tmp_path}"\n{PROM}step_s = 30\n'
           '[ingest.sources.prometheus.auth]\nbearer_token_env = "PROM_TOKEN"\n')
    with pytest.warns(MovedKey) as told:
        moved = config(tmp_path, old).ingest
    assert sorted(str(w.message) for w in told) == [
        "ingest.auth, ingest.prometheus_url, ingest.step_s are deprecated: write them in [ingest.sources.prometheus]",
        "ingest.folder is deprecated: write it in [ingest.sources.drop-folder]",
    ]
    assert moved == config(tmp_path, new).ingest and moved.source_settings == config(tmp_path, new).ingest.source_settings


def test_fleet_ingest_asks_the_registry_for_the_source_its_options_set():
    assert isinstance(source_for({"folder": "/tmp", "settle_s": 1.0}, "fleet ingest --watch"), DropFolder)
    assert isinstance(source_for({"prometheus_url": "http://x", "step_s": 30}, "fleet ingest --prometheus"), PrometheusSource)
    with pytest.raises(ConfigError, match=r"^fleet ingest --watch: no telemetry source takes folder, prometheus_url$"):
        source_for({"folder": "/tmp", "prometheus_url": "http://x"}, "fleet ingest --watch")


def test_the_drop_folder_check_says_whether_the_folder_is_there(tmp_path):
    assert source_checks([DropFolder(DropFolderSettings(folder=str(tmp_path)))], 5.0) == [
        ("drop folder", True, f"{tmp_path}: a folder")]
    gone = tmp_path / "gone"
    assert source_checks([DropFolder(DropFolderSettings(folder=str(gone)))], 5.0) == [
        ("drop folder", False, f"{gone}: no such folder")]


def test_the_prometheus_check_asks_a_range_query_with_the_credentials(monkeypatch):
    monkeypatch.setenv("FLEET_PROM_TOKEN", SECRET)
    auth = Credentials(bearer_token_env="FLEET_PROM_TOKEN")
    with fake_prometheus() as prom:
        got = source_checks([PrometheusSource(PrometheusSettings(prometheus_url=prom.url, auth=auth))], 5.0)
    assert got == [("prometheus", True, f"{prom.url} answers a range query")]
    assert [(r.path, r.query, r.authorization) for r in prom.requests] == [("/api/v1/query_range", "vector(1)", f"Bearer {SECRET}")]


def test_a_prometheus_that_refuses_fails_its_check_in_one_line_without_the_secret(monkeypatch):
    monkeypatch.setenv("FLEET_PROM_TOKEN", SECRET)
    url = f"http://user:{SECRET}@127.0.0.1:{closed_port()}"
    [(name, ok, line)] = source_checks([PrometheusSource(PrometheusSettings(prometheus_url=url))], 5.0)
    assert (name, ok) == ("prometheus", False)
    assert "cannot reach the server" in line and SECRET not in line and "\n" not in line
