"""The drop folder as a service calls it, once per tick with its own clock: one naming rule for half-written files,
settling by the injected clock, errors naming the file as dropped, nothing overwritten, a file changed mid-read put back."""

from __future__ import annotations

import os

import pytest

from fleet.ingest import IngestSettings, drain_drop_folder
from fleet.ingest.drop import is_half_written
from tests.storage.stored import ingest_runs

NOW = 1_767_225_600
T0 = 1_735_689_600
MTIME = 1_767_000_000  # every file here is written with this mtime; the clock is set against it


def _drop(path, rows, mtime=MTIME) -> None:
    path.write_text("card_id,ts,tokens_per_s\n" + "".join(f"{c},{t},{v}\n" for c, t, v in rows))
    os.utime(path, (mtime, mtime))


def _settings() -> IngestSettings:
    return IngestSettings(now_ts=NOW)


@pytest.mark.parametrize("name", ["a.csv.part", "a.csv.PART", "a.csv.tmp", "a.jsonl.partial", ".a.csv", ".hidden.parquet"])
def test_a_half_written_name_is_never_taken(tmp_path, name, new_repo):
    assert is_half_written(name)
    _drop(tmp_path / name, [("gpu-1", T0, 1)])
    assert drain_drop_folder(new_repo(), tmp_path, _settings, settle_s=2, clock=lambda: MTIME + 10**6) == []
    assert (tmp_path / name).exists()


def test_settling_is_judged_by_the_injected_clock(tmp_path, new_repo):
    repo = new_repo()
    _drop(tmp_path / "a.csv", [("gpu-1", T0, 1)])
    assert drain_drop_folder(repo, tmp_path, _settings(), settle_s=5, clock=lambda: MTIME + 4) == []
    (taken,) = drain_drop_folder(repo, tmp_path, _settings(), settle_s=5, clock=lambda: MTIME + 5)
    assert (taken.name, taken.report.stored, taken.moved_to) == ("a.csv", 1, tmp_path / "done" / "a.csv")


def test_errors_name_the_file_as_dropped_not_its_processing_path(tmp_path, new_repo):
    drop = tmp_path / "drop"
    drop.mkdir()
    (drop / "bad.csv").write_text("card,ts\n1,2\n")
    os.utime(drop / "bad.csv", (MTIME, MTIME))
    _drop(drop / "good.csv", [("gpu-1", T0, 1)])
    repo = new_repo()
    results = {r.name: r for r in drain_drop_folder(repo, drop, _settings, settle_s=0, clock=lambda: MTIME)}
    bad = results["bad.csv"]
    assert bad.error.startswith(f"{str(drop / 'bad.csv')!r}: missing column") and "processing" not in bad.error
    assert (drop / "failed" / "bad.csv.error.txt").read_text() == bad.error + "\n"
    assert bad.source == str(drop / "bad.csv") and results["good.csv"].source == str(drop / "good.csv")
    assert [run.source for run in ingest_runs(repo.engine)] == [str(drop / "good.csv")]


def test_nothing_in_done_or_failed_is_overwritten(tmp_path, new_repo):
    repo = new_repo()
    for k in range(3):
        _drop(tmp_path / "a.csv", [("gpu-1", T0 + k, 1)])
        (tmp_path / "bad.csv").write_text(f"nope{k}\n")
        os.utime(tmp_path / "bad.csv", (MTIME, MTIME))
        drain_drop_folder(repo, tmp_path, _settings, settle_s=0, clock=lambda: MTIME)
    assert sorted(p.name for p in (tmp_path / "done").iterdir()) == ["a.1.csv", "a.2.csv", "a.csv"]
    assert sorted(p.name for p in (tmp_path / "failed").iterdir()) == [
        "bad.1.csv", "bad.1.csv.error.txt", "bad.2.csv", "bad.2.csv.error.txt", "bad.csv", "bad.csv.error.txt"]
    assert "nope2" in (tmp_path / "failed" / "bad.2.csv").read_text()
    assert repo.sample_count() == 3


def test_a_file_changed_while_it_was_read_goes_back_and_is_taken_again(tmp_path, new_repo):
    repo = new_repo()
    _drop(tmp_path / "a.csv", [("gpu-1", T0, 1)])
    calls = []

    def settings_while_writing() -> IngestSettings:
        if not calls:  # the writer was not done: it appends a record while the file is being ingested
            with open(tmp_path / "processing" / "a.csv", "a") as f:
                f.write(f"gpu-1,{T0 + 60},2\n")
            os.utime(tmp_path / "processing" / "a.csv", (MTIME + 1, MTIME + 1))
        calls.append(1)
        return _settings()

    (first,) = drain_drop_folder(repo, tmp_path, settings_while_writing, settle_s=0, clock=lambda: MTIME + 1)
    assert first.put_back and first.moved_to == tmp_path / "a.csv" and (tmp_path / "a.csv").exists()
    (again,) = drain_drop_folder(repo, tmp_path, settings_while_writing, settle_s=0, clock=lambda: MTIME + 1)
    assert not again.put_back and (again.report.read, again.report.duplicates) == (2, first.report.stored)
    assert repo.sample_count() == 2 and (tmp_path / "done" / "a.csv").exists()
