"""The service's drop folder is the ingest's: a file written in place is taken only once settled, whole; nothing in
done/ is overwritten; a bad file goes to failed/ with NAME.error.txt naming it as dropped, and the others go on."""

from __future__ import annotations

import logging
import os
import textwrap

from fleet.service.config import load_service_config
from fleet.service.telemetry import IngestJob
from storage import sqlite_memory_repository
from storage.service_store import ServiceStore
from tests.fake_prometheus import StepClock

T0 = 1_767_225_600  # 2026-01-01T00:00Z: the samples' hour
CLOCK0 = T0 + 3 * 3600  # the service's clock at the first run; files' mtimes are set against it
HEADER = "card_id,ts,tokens_per_s\n"


def _job(tmp_path, clock):
    drop = tmp_path / "drop"
    drop.mkdir()
    (tmp_path / "fleet.toml").write_text(textwrap.dedent(f"""\
        [ingest]
        default_class = "flagship"
        [ingest.sources.drop-folder]
        folder = "{drop}"
        """))
    repo = sqlite_memory_repository()
    return IngestJob(load_service_config(tmp_path / "fleet.toml"), repo, ServiceStore(repo.engine), clock), drop, repo


def _rows(k0: int, k1: int) -> str:
    return "".join(f"gpu-{k % 3},{T0 + 60 * k},{5000 + k}\n" for k in range(k0, k1))


def _touch(path, mtime: float) -> None:
    os.utime(path, (mtime, mtime))


def test_a_file_written_in_place_over_several_runs_is_read_whole_once_it_settles(tmp_path):
    clock = StepClock(CLOCK0)
    job, drop, repo = _job(tmp_path, clock)
    f = drop / "minutes.csv"
    f.write_text(HEADER + _rows(0, 4))  # the writer's first chunk
    _touch(f, clock.t - 0.5)
    assert job.run() == 0 and f.exists()  # written half a second ago: not settled
    with f.open("a") as out:
        out.write(_rows(4, 7))  # the writer appends as the next run comes
    clock.t += 60
    _touch(f, clock.t - 1)
    assert job.run() == 0 and f.exists()
    with f.open("a") as out:
        out.write(_rows(7, 12))  # the last chunk
    clock.t += 60
    _touch(f, clock.t - 30)
    assert job.run() == 12  # read once, whole
    assert not f.exists() and (drop / "done" / "minutes.csv").read_text() == HEADER + _rows(0, 12)
    assert repo.sample_count() == 12
    clock.t += 60
    assert job.run() == 0


def test_a_second_file_of_a_name_already_in_done_is_kept_beside_it(tmp_path):
    clock = StepClock(CLOCK0)
    job, drop, repo = _job(tmp_path, clock)
    for run, rows in enumerate((_rows(0, 3), _rows(3, 5))):
        (drop / "hour.csv").write_text(HEADER + rows)
        _touch(drop / "hour.csv", clock.t - 60)
        assert job.run() == len(rows.splitlines())
        clock.t += 60
    assert (drop / "done" / "hour.csv").read_text() == HEADER + _rows(0, 3)  # the first one, not overwritten
    assert (drop / "done" / "hour.1.csv").read_text() == HEADER + _rows(3, 5)
    assert repo.sample_count() == 5


def test_a_bad_file_goes_to_failed_with_its_error_and_the_others_are_read(tmp_path, caplog):
    clock = StepClock(CLOCK0)
    job, drop, repo = _job(tmp_path, clock)
    (drop / "a-bad.csv").write_text("card,when\n1,2\n")
    (drop / "b-good.csv").write_text(HEADER + _rows(0, 3))
    for p in drop.iterdir():
        _touch(p, clock.t - 60)
    with caplog.at_level(logging.WARNING, logger="fleet.service.telemetry"):
        assert job.run() == 3  # the records read: the good file's, after the bad one failed
    assert (drop / "failed" / "a-bad.csv").exists() and (drop / "done" / "b-good.csv").exists()
    error = (drop / "failed" / "a-bad.csv.error.txt").read_text()
    assert error.startswith(f"{str(drop / 'a-bad.csv')!r}: missing column") and "processing" not in error
    assert error.strip() in caplog.text
    assert repo.sample_count() == 3
