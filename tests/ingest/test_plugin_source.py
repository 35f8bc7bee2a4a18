"""A new telemetry source is its module, its registration and its test, and nothing else.

The source here is written the way the drop folder and Prometheus are (`fleet.ingest.sources`): a settings model of
its own table, `[ingest.sources.spool]` (`spool_file`, `spool_max_bytes`), a pull that stores one run's records, and
a `fleet serve --check` line. Registered, its table is read and validated with the service's config, the service's
ingest job pulls it when its table is given, and its check line is the check's, with no change anywhere else.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import Field

from fleet.core.errors import ConfigError
from fleet.core.registry import Plugin
from fleet.core.scenario import Strict
from fleet.ingest import parse_bytes
from fleet.ingest.drop import DropFolder
from fleet.ingest.formats import BadSource
from fleet.ingest.sources import TELEMETRY_SOURCES, IngestRun, source_checks
from fleet.ingest.store import ingest_parsed
from fleet.service.config import load_service_config
from fleet.service.telemetry import IngestJob
from storage import as_store, sqlite_memory_repository
from tests.fake_prometheus import StepClock

T0 = 1_767_225_600  # 2026-01-01T00:00Z


# -- the source's module ----------------------------------------------------------------------------------------


class SpoolSettings(Strict):
    """A file an exporter rewrites with its recent samples (CSV), read whole at each run: duplicates are free."""

    spool_file: str
    spool_max_bytes: int = Field(default=1_000_000, gt=0)


class Spool:
    check_name = "spool"

    def __init__(self, settings: SpoolSettings):
        self.settings = settings

    def pull(self, run: IngestRun) -> int:
        own = self.settings
        data = Path(own.spool_file).read_bytes()
        if len(data) > own.spool_max_bytes:
            raise BadSource(f"spool {own.spool_file!r}: {len(data):,} bytes, over spool_max_bytes ({own.spool_max_bytes:,})")
        return ingest_parsed(run.repo, parse_bytes(data, "csv", f"spool {own.spool_file}"), run.settings()).read

    def check(self, timeout_s: float) -> tuple[bool, str]:
        found = Path(self.settings.spool_file).is_file()
        return found, f"{self.settings.spool_file}: {'a file' if found else 'no such file'}"


# -- its registration -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def registered():
    if "spool" not in TELEMETRY_SOURCES:
        TELEMETRY_SOURCES.register(Plugin("spool", SpoolSettings, Spool))


# -- its test ---------------------------------------------------------------------------------------------------


def config(tmp_path, table: str = "[ingest.sources.spool]", **keys):
    body = "".join(f"{k} = {v!r}\n" for k, v in keys.items()).replace("'", '"')
    (tmp_path / "fleet.toml").write_text(textwrap.dedent('''\
        [ingest]
        default_class = "flagship"
        ''') + (f"{table}\n{body}" if keys else ""))
    return load_service_config(tmp_path / "fleet.toml")


def spool(tmp_path, minutes: int) -> Path:
    path = tmp_path / "spool.csv"
    path.write_text("card_id,ts,tokens_per_s\n" + "".join(f"gpu-{m % 2},{T0 + 60 * m},{5000 + m}\n" for m in range(minutes)))
    return path


def test_the_service_pulls_the_new_source_its_table_turns_on(tmp_path):
    path = spool(tmp_path, 6)
    cfg = config(tmp_path, spool_file=str(path))
    [source] = cfg.ingest.telemetry_sources()
    assert isinstance(source, Spool) and source.settings == SpoolSettings(spool_file=str(path))  # read from its table
    store = as_store(sqlite_memory_repository())
    repo = store.telemetry
    job = IngestJob(cfg, repo, store.journal, StepClock(T0 + 3600))
    assert job.run() == 6 and repo.sample_count() == 6
    spool(tmp_path, 9)  # the exporter rewrote it: the first six are duplicates
    assert job.run() == 9 and repo.sample_count() == 9


def test_the_new_source_validates_its_own_table_with_the_config(tmp_path):
    with pytest.raises(ConfigError, match=r"ingest\.sources\.spool\.spool_max_bytes: Input should be greater than 0"):
        config(tmp_path, spool_file="x.csv", spool_max_bytes=0)
    with pytest.raises(ConfigError, match=r"ingest\.sources\.spool\.spool_fil: unknown key"):
        config(tmp_path, spool_file="x.csv", spool_fil="x.csv")


def test_the_new_source_is_off_without_its_table_and_the_others_are_untouched(tmp_path):
    cfg = config(tmp_path, "[ingest.sources.drop-folder]", folder=str(tmp_path))
    assert [type(source) for source in cfg.ingest.telemetry_sources()] == [DropFolder]
    assert "spool" not in cfg.ingest.source_settings


def test_the_new_source_has_its_check_line(tmp_path):
    path = spool(tmp_path, 1)
    assert source_checks(config(tmp_path, spool_file=str(path)).ingest.telemetry_sources(), 5.0) == [
        ("spool", True, f"{path}: a file")]
    missing = tmp_path / "gone.csv"
    assert source_checks(config(tmp_path, spool_file=str(missing)).ingest.telemetry_sources(), 5.0) == [
        ("spool", False, f"{missing}: no such file")]


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="telemetry source 'spool' registered twice"):
        TELEMETRY_SOURCES.register(TELEMETRY_SOURCES.get("spool"))
