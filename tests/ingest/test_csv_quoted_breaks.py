"""A quoted line break in a CSV: its line is quarantined, every good record is stored, in a file and in a drop
folder, and a reader's failure on one dropped file sends it to failed/ while the files behind it are taken."""

from __future__ import annotations

import csv
import io
import os

from hypothesis import strategies as st

from fleet.ingest import IngestSettings, drain_drop_folder, ingest_file, ingest_parsed, parse_bytes
from storage import sqlite_memory_repository
from tests.ingest.props import fast_and_slow
from tests.storage.stored import quarantined

NOW = 1_767_225_600
T0 = 1_735_689_600
MTIME = 1_767_000_000
HEADER = "card_id,ts,tokens_per_s\n"


def _cards(repo) -> set[str]:
    with repo.engine.connect() as conn:
        return {k for (k,) in conn.exec_driver_sql(
            "SELECT DISTINCT c.card_key FROM telemetry_samples s JOIN cards c ON c.id = s.card_id")}


def test_a_quoted_line_break_quarantines_its_line_and_stores_the_rest(tmp_path, new_repo):
    path = tmp_path / "nl.csv"
    path.write_text(f'{HEADER}gpu-1,{T0},100\n"gpu\n7",{T0},100\ngpu-2,{T0},100\n')
    repo = new_repo()
    out = ingest_file(repo, path, IngestSettings(now_ts=NOW))
    assert {"gpu-1", "gpu-2"} <= _cards(repo)
    assert "gpu\n7" not in _cards(repo)
    assert [(r["record_no"], r["reason"]) for r in quarantined(repo.engine).to_dict("records")] == [(3, "malformed-line")]
    assert out.read == out.stored + out.duplicates + out.quarantined


def test_the_smallest_form_is_two_malformed_lines(new_repo):
    repo = new_repo()
    out = ingest_parsed(repo, parse_bytes(f'{HEADER}a,b,"\n1\n'.encode(), "csv", "t.csv"), IngestSettings(now_ts=NOW))
    assert (out.stored, out.quarantined) == (0, 2)


def _drop(path, text: str) -> None:
    path.write_text(text)
    os.utime(path, (MTIME, MTIME))


def test_in_a_drop_folder_the_file_is_done_and_the_good_file_behind_it_is_taken(tmp_path, new_repo):
    repo = new_repo()
    _drop(tmp_path / "a.csv", f'{HEADER}gpu-1,{T0},100\n"gpu\n7",{T0},100\n')
    _drop(tmp_path / "b.csv", f"{HEADER}gpu-3,{T0},100\n")
    taken = drain_drop_folder(repo, tmp_path, IngestSettings(now_ts=NOW), clock=lambda: MTIME + 10)
    assert [(t.name, t.error) for t in taken] == [("a.csv", None), ("b.csv", None)]
    assert not list((tmp_path / "processing").iterdir())
    assert {"gpu-1", "gpu-3"} <= _cards(repo)


def test_a_reader_failure_sends_the_file_to_failed_and_the_next_file_is_taken(tmp_path, new_repo, monkeypatch):
    from fleet.ingest import csv_reader

    real = csv_reader.block_piece

    def broken(block, names):
        if b"poison" in block.data:
            raise TypeError("a reader bug")
        return real(block, names)

    monkeypatch.setattr(csv_reader, "block_piece", broken)
    repo = new_repo()
    _drop(tmp_path / "a.csv", f"{HEADER}poison,{T0},100\n")
    _drop(tmp_path / "b.csv", f"{HEADER}gpu-3,{T0},100\n")
    taken = drain_drop_folder(repo, tmp_path, IngestSettings(now_ts=NOW), clock=lambda: MTIME + 10)
    assert [t.name for t in taken] == ["a.csv", "b.csv"]
    assert "a.csv" in taken[0].error and "TypeError" in taken[0].error
    assert taken[1].error is None
    assert (tmp_path / "failed" / "a.csv").exists() and (tmp_path / "failed" / "a.csv.error.txt").exists()
    assert not list((tmp_path / "processing").iterdir())
    assert _cards(repo) == {"gpu-3"}


card_ids = st.builds(lambda a, mid, b: a + mid + b, st.sampled_from("abg"), st.text(alphabet='ab7,"\n -', max_size=6),
                     st.sampled_from("xyz"))


def _quoted_fields(ids: list[str]) -> None:
    """Every record of a CSV whose fields may be quoted (commas, doubled quotes, line breaks) is stored if it is one
    line, and never stored whole if a quoted line break split it; the read figures add up."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["card_id", "ts", "tokens_per_s"])
    for i, k in enumerate(ids):
        w.writerow([k, T0 + 3600 * i, 100 + i])
    repo = sqlite_memory_repository()
    got = ingest_parsed(repo, parse_bytes(out.getvalue().encode(), "csv", "q.csv"), IngestSettings(now_ts=NOW))
    stored = _cards(repo)
    assert got.read == got.stored + got.duplicates + got.quarantined
    for k in ids:
        if "\n" in k:
            assert k not in stored
        else:
            assert k in stored


test_quoted_fields, test_quoted_fields_100k = fast_and_slow(_quoted_fields, ids=st.lists(card_ids, min_size=1, max_size=8))
