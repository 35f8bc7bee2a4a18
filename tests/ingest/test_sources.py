"""The telemetry sources' registry: each source's keys of `[ingest]` validated at their place, the sources a config
turns on, and each one's `fleet serve --check` line."""

from __future__ import annotations

import socket

import pytest

from fleet.core.errors import ConfigError
from fleet.credentials import Credentials
from fleet.ingest.drop import DropFolderSettings
from fleet.ingest.prometheus_source import PrometheusSettings
from fleet.ingest.sources import TELEMETRY_SOURCES, source_checks, sources_on
from fleet.service.config import load_service_config
from tests.fake_prometheus import fake_prometheus

SECRET = "s3cret-token-value"


def config(tmp_path, text: str):
    (tmp_path / "fleet.toml").write_text("[ingest]\n" + text)
    return load_service_config(tmp_path / "fleet.toml")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("text,error", [
    ('settle_s = -1\n', r"ingest\.settle_s: Input should be greater than or equal to 0"),
    ('step_s = 0\n', r"ingest\.step_s: Input should be greater than or equal to 1"),
    ('strict = "sometimes"\n', r"ingest\.strict: Input should be a valid boolean"),
    ('foldr = "/tmp"\n', r"ingest\.foldr: unknown key"),
    ('demand_source = "csv"\n', r"demand_source 'csv' reads files"),
    ('demand_source = "query"\n', r"demand_source 'query' needs demand_query"),
    ('demand_source = "gateway"\n', r"unknown demand source 'gateway'"),
    ('prometheus_url = "http://127.0.0.1:9090"\nauth = {bearer_token_env = "A", bearer_token_file = "f"}\n',
     r"ingest\.auth: .*give each secret once"),
])
def test_each_source_validates_its_own_keys_at_their_place(tmp_path, text, error):
    with pytest.raises(ConfigError, match=error):
        config(tmp_path, text)


def test_every_bad_key_is_named_at_once(tmp_path):
    with pytest.raises(ConfigError) as err:
        config(tmp_path, 'busy_floor = 2\nsettle_s = -1\nnope = 1\n')
    assert all(f"ingest.{key}" in str(err.value) for key in ("busy_floor", "settle_s", "nope"))


def test_a_config_turns_on_the_sources_its_keys_name(tmp_path):
    assert sources_on(config(tmp_path, "").ingest.sources) == []
    cfg = config(tmp_path, f'folder = "{tmp_path}"\nprometheus_url = "http://127.0.0.1:9090"\nstep_s = 30\n'
                           'auth = {bearer_token_env = "PROM_TOKEN"}\n')
    on = sources_on(cfg.ingest.sources)
    assert [source for source, _ in on] == [TELEMETRY_SOURCES.get("drop-folder"), TELEMETRY_SOURCES.get("prometheus")]
    assert on[0][1] == DropFolderSettings(folder=str(tmp_path))
    assert on[1][1].step_s == 30 and on[1][1].demand_source_name == "vllm-queue"
    assert cfg.ingest.prometheus_url == "http://127.0.0.1:9090" and cfg.ingest.step_s == 30  # a source's key reads as [ingest]'s
    assert cfg.ingest.credentials() == [Credentials(bearer_token_env="PROM_TOKEN")]
    with pytest.raises(AttributeError, match="no key 'nope'"):
        cfg.ingest.nope  # noqa: B018


def test_the_drop_folder_check_says_whether_the_folder_is_there(tmp_path):
    assert source_checks({"drop-folder": DropFolderSettings(folder=str(tmp_path))}, 5.0) == [
        ("drop folder", True, f"{tmp_path}: a folder")]
    gone = tmp_path / "gone"
    assert source_checks({"drop-folder": DropFolderSettings(folder=str(gone))}, 5.0) == [
        ("drop folder", False, f"{gone}: no such folder")]


def test_the_prometheus_check_asks_a_range_query_with_the_credentials(monkeypatch):
    monkeypatch.setenv("FLEET_PROM_TOKEN", SECRET)
    auth = Credentials(bearer_token_env="FLEET_PROM_TOKEN")
    with fake_prometheus() as prom:
        got = source_checks({"prometheus": PrometheusSettings(prometheus_url=prom.url, auth=auth)}, 5.0)
    assert got == [("prometheus", True, f"{prom.url} answers a range query")]
    assert [(r.path, r.query, r.authorization) for r in prom.requests] == [("/api/v1/query_range", "vector(1)", f"Bearer {SECRET}")]


def test_a_prometheus_that_refuses_fails_its_check_in_one_line_without_the_secret(monkeypatch):
    monkeypatch.setenv("FLEET_PROM_TOKEN", SECRET)
    url = f"http://user:{SECRET}@127.0.0.1:{closed_port()}"
    [(name, ok, line)] = source_checks({"prometheus": PrometheusSettings(prometheus_url=url)}, 5.0)
    assert (name, ok) == ("prometheus", False)
    assert "cannot reach the server" in line and SECRET not in line and "\n" not in line
