"""Ingest: every record stored, a duplicate, or quarantined with its reason; a bad file changes nothing."""

from __future__ import annotations

import io
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleet.ingest import BadSource, IngestSettings, ingest_file, ingest_parsed, parse_bytes
from storage import ClassSpec
from tests.storage.stored import ingest_runs, quarantined

NOW = 1_767_225_600  # 2026-01-01: the clock the tests pass in
T0 = 1_735_689_600  # 2025-01-01T00:00:00Z


@pytest.fixture
def repo(new_repo):
    r = new_repo()
    r.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    r.declare_cards({"gpu-1": "flagship", "gpu-2": "flagship"}, NOW)
    return r


def settings(**kw) -> IngestSettings:
    return IngestSettings(now_ts=NOW, **kw)


def ingest_text(repo, text: str, fmt: str = "csv", **kw):
    return ingest_parsed(repo, parse_bytes(text.encode(), fmt, f"test.{fmt}"), settings(**kw))


# One row per reason: (line, reason or None when it must be stored).
CASES = [
    (f"gpu-1,{T0},5800.5,0.5", None),
    (f"gpu-1,2025-01-01T00:01:00Z,5900,", None),
    (f"gpu-2,2025-01-01 02:00:00+02:00,6100,", None),  # = T0 in UTC
    (f"gpu-1,{T0 + 120}.9,6000,", None),  # fractional epoch: floored to the second
    (f"gpu-1,{T0},5800.5,0.5", "dup"),  # same sample again
    (f"gpu-1,{T0 + 60},abc,", "unparseable:tokens_per_s"),
    (f"gpu-1,{T0 + 180},-1,", "negative:tokens_per_s"),
    (f"gpu-1,{T0 + 240},nan,", "non-finite:tokens_per_s"),
    (f"gpu-1,{T0 + 300},inf,", "non-finite:tokens_per_s"),
    (f"gpu-1,,6000,", "missing:ts"),
    (f",{T0 + 360},6000,", "missing:card_id"),
    (f"gpu-1,{T0 + 420},,", "missing:tokens_per_s"),
    (f"gpu-1,last tuesday,6000,", "unparseable:ts"),
    (f"gpu-1,{NOW + 10 * 86400},6000,", "out-of-range:ts"),
    (f"gpu-1,1700000000000,6000,", "out-of-range:ts"),  # milliseconds, not seconds
    (f"gpu-1,{T0 + 480},6000,1.5", "out-of-range:busy_fraction"),
    (f"gpu-1,{T0 + 540},6000,lots", "unparseable:busy_fraction"),
    (f"gpu-1,{T0 + 600},60000,", "implausible:tokens_per_s"),  # 10x the rated 6000
    (f"gpu-1,{T0 + 660},6000", "malformed-line"),
    (f"gpu-1,{T0 + 720},6000,0.5,extra", "malformed-line"),
    (f"gpu-1,{T0 + 60},5000,", "conflicting-duplicate"),  # same card and second as the 2nd row, another value
]


def cases_csv() -> str:
    return "card_id,ts,tokens_per_s,busy_fraction\n" + "\n".join(line for line, _ in CASES) + "\n\n"


def test_every_record_has_one_outcome_and_counts_add_up(repo):
    out = ingest_text(repo, cases_csv())
    expected = pd.Series([why for _, why in CASES if why not in (None, "dup")]).value_counts().to_dict()
    assert out.read == len(CASES)  # the blank line at the end is no record
    assert out.stored == 4 == repo.sample_count()
    assert out.duplicates == 1
    assert out.reasons == expected
    assert out.read == out.stored + out.duplicates + out.quarantined
    q = quarantined(repo.engine)
    assert sorted(q["reason"].value_counts().to_dict().items()) == sorted(expected.items())
    # raw text and line number are kept: the line of "abc" is line 7 (header is line 1)
    row = q[q["reason"] == "unparseable:tokens_per_s"].iloc[0]
    assert row["raw_text"] == CASES[5][0] and row["record_no"] == 7
    run = ingest_runs(repo.engine)[-1]
    assert (run.read, run.stored, run.duplicates, run.quarantined, run.finished_ts is not None) == (out.read, 4, 1, out.quarantined, True)


def test_same_file_again_stores_nothing_new(repo):
    first = ingest_text(repo, cases_csv())
    samples, quarantine = repo.sample_count(), len(quarantined(repo.engine))
    again = ingest_text(repo, cases_csv())
    assert again.stored == 0
    assert again.duplicates == first.stored + first.duplicates
    assert again.quarantined == first.quarantined
    assert repo.sample_count() == samples
    assert len(quarantined(repo.engine)) == quarantine  # each bad record quarantined once


def test_rollups_follow_the_samples(repo):
    text = "card_id,ts,tokens_per_s,busy_fraction\n" + "\n".join(
        [f"gpu-1,{T0},1000,0.5", f"gpu-1,{T0 + 60},3000,", f"gpu-1,{T0 + 3600},2000,1.0", f"gpu-2,{T0 + 10},4000,0.25"]
    )
    ingest_text(repo, text)
    r = repo.hourly_rollups().set_index(["card_key", "hour_ts"])
    assert r.loc[("gpu-1", T0), "sample_count"] == 2
    assert r.loc[("gpu-1", T0), "mean_tps"] == 2000.0
    assert r.loc[("gpu-1", T0), "busy_tps"] == 2000.0  # 1000 tok/s at half busy: 2000 per busy second
    assert r.loc[("gpu-2", T0), "busy_tps"] == 16000.0
    # a later batch adds to the same hour without rereading it
    ingest_text(repo, f"card_id,ts,tokens_per_s\ngpu-1,{T0 + 120},5000\n")
    r = repo.hourly_rollups().set_index(["card_key", "hour_ts"])
    assert r.loc[("gpu-1", T0), "sample_count"] == 3
    assert r.loc[("gpu-1", T0), "mean_tps"] == 3000.0


def test_strict_quarantines_unknown_cards_and_register_unknown_registers_them(repo):
    text = f"card_id,ts,tokens_per_s,card_class\ngpu-1,{T0},6000,\ngpu-9,{T0},6000,\ngpu-8,{T0},50000,flagship\ngpu-1,{T0 + 60},6000,bargain\n"
    strict = ingest_text(repo, text, strict=True)
    assert (strict.stored, strict.reasons) == (1, {"unknown-card": 2, "class-conflict": 1})
    assert "gpu-9" not in repo.cards()
    loose = ingest_text(repo, text, default_class="spare")
    assert loose.stored == 1  # gpu-9; gpu-8 is implausible for a flagship, gpu-1 again a duplicate
    assert loose.reasons == {"implausible:tokens_per_s": 1, "class-conflict": 1}
    cards = repo.cards()
    assert cards["gpu-9"].class_name == "spare" and cards["gpu-9"].rated_tps is None
    assert "gpu-8" not in cards  # no valid record, no registration


def test_csv_jsonl_and_parquet_store_the_same_samples(new_repo):
    frame = pd.DataFrame(
        {
            "card_id": ["gpu-1", "gpu-2", "gpu-1"],
            "ts": [T0, T0 + 60, T0 + 3600],
            "tokens_per_s": [5800.25, 6100.0, 1e-3],
            "busy_fraction": [0.5, None, 1.0],
        }
    )
    stored = []
    for fmt, data in [
        ("csv", frame.to_csv(index=False).encode()),
        ("jsonl", frame.to_json(orient="records", lines=True).encode()),
        ("parquet", _parquet(frame)),
    ]:
        r = new_repo()
        out = ingest_parsed(r, parse_bytes(data, fmt, f"f.{fmt}"), settings())
        assert (out.read, out.stored, out.quarantined) == (3, 3, 0), fmt
        stored.append(r.hourly_rollups().drop(columns=["card_class"]))
    pd.testing.assert_frame_equal(stored[0], stored[1])
    pd.testing.assert_frame_equal(stored[0], stored[2])


def test_parquet_timestamps_and_bad_rows(new_repo):
    table = pa.table(
        {
            "card_id": pa.array(["gpu-1", "gpu-1", None, "gpu-1"]),
            "ts": pa.array([T0 * 1000, (T0 + 60) * 1000, (T0 + 120) * 1000, None], pa.timestamp("ms", tz="UTC")),
            "tokens_per_s": pa.array([100.0, float("nan"), 5.0, 1.0]),  # a NaN, not a null
        }
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    r = new_repo()
    out = ingest_parsed(r, parse_bytes(buf.getvalue(), "parquet", "f.parquet"), settings())
    assert out.stored == 1 and out.reasons == {"non-finite:tokens_per_s": 1, "missing:card_id": 1, "missing:ts": 1}
    assert r.hourly_rollups()["hour_ts"].tolist() == [T0]


def test_jsonl_bad_lines(new_repo):
    lines = [
        json.dumps({"card_id": "a", "ts": T0, "tokens_per_s": 1.0}),
        "{not json",
        "[1, 2]",
        json.dumps({"card_id": "a", "ts": T0 + 1, "tokens_per_s": 1.0, "colour": "red"}),
        json.dumps({"card_id": "a", "ts": T0 + 2, "tokens_per_s": True}),
        json.dumps({"card_id": ["a"], "ts": T0 + 3, "tokens_per_s": 1}),
        json.dumps({"card_id": "a", "ts": "2025-01-01T00:00:04Z", "tokens_per_s": "2.5"}),
    ]
    r = new_repo()
    out = ingest_text(r, "\n".join(lines), "jsonl")
    assert out.stored == 2
    assert out.reasons == {"invalid-json": 1, "not-an-object": 1, "unknown-field": 1, "unparseable:tokens_per_s": 1, "unparseable:card_id": 1}


@pytest.mark.parametrize(
    "data, fmt, message",
    [
        (b"card_id,ts,tokens_per_s\n\xff\xfe,1,2\n", "csv", "not UTF-8"),
        (b"card_id,ts\ngpu-1,1\n", "csv", "missing column tokens_per_s"),
        (b"card_id,ts,tokens_per_s,busy_frac\n", "csv", "unknown column 'busy_frac'"),
        (b"card_id,ts,ts,tokens_per_s\n", "csv", "given twice"),
        (b"", "csv", "header"),
        (b"PAR1\x00\x00", "csv", "Parquet file"),
        (b"card_id\x00,ts,tokens_per_s\n", "csv", "NUL"),
        (b"card_id,ts,tokens_per_s\n1,2,3\n", "parquet", "not a readable Parquet file"),
        (b"\xc3\x28", "jsonl", "not UTF-8"),
        (b"card_id,ts,tokens_per_s\ngpu-1,1,2\n", "jsonl", "first line is not a JSON object"),
    ],
)
def test_bad_file_is_one_error_and_changes_nothing(repo, data, fmt, message):
    with pytest.raises(BadSource, match=message):
        ingest_parsed(repo, parse_bytes(data, fmt, "bad"), settings())
    assert ingest_runs(repo.engine) == [] and repo.sample_count() == 0


def test_parquet_with_missing_column_names_the_file():
    data = _parquet(pd.DataFrame({"card_id": ["a"], "tokens_per_s": [1.0]}))
    with pytest.raises(BadSource, match=r"'x.parquet': missing column ts"):
        parse_bytes(data, "parquet", "x.parquet")


def test_unknown_suffix_and_missing_file(repo, tmp_path):
    (tmp_path / "t.txt").write_text("card_id,ts,tokens_per_s\n")
    with pytest.raises(BadSource, match="unknown file type '.txt'"):
        ingest_file(repo, tmp_path / "t.txt", settings())
    with pytest.raises(BadSource, match="no such file"):
        ingest_file(repo, tmp_path / "gone.csv", settings())


def test_batches_commit_separately_and_count_per_batch(repo):
    rows = "\n".join(f"gpu-1,{T0 + 60 * i},{6000 + i}" for i in range(25))
    out = ingest_text(repo, "card_id,ts,tokens_per_s\n" + rows + "\nbroken\n", batch_records=10)
    assert out.batches == 3 and out.stored == 25 and out.quarantined == 1
    with repo.engine.connect() as conn:
        from sqlalchemy import text

        per = conn.execute(text("SELECT part, read, stored, quarantined FROM ingest_batches ORDER BY part")).all()
    assert [tuple(p) for p in per] == [(0, 10, 10, 0), (1, 10, 10, 0), (2, 6, 5, 1)]


def _parquet(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buf)
    return buf.getvalue()


FAR_TIMES = ["9999-12-31T23:59:59Z", "-1-1", "-0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "2263-01-01T00:00:00Z", "2262-04-12", "1677-09-21T00:00:00+01:00", "9999-12-31"]


def _far_time_file(fmt: str, far: str) -> bytes:
    rows = [("gpu-1", str(T0), 100.0), ("gpu-1", far, 200.0), ("gpu-1", "9999-13-01T00:00:00Z", 300.0), ("gpu-2", str(T0 + 60), 400.0)]
    if fmt == "csv":
        return ("card_id,ts,tokens_per_s\n" + "".join(f"{c},{t},{v}\n" for c, t, v in rows)).encode()
    if fmt == "jsonl":
        return "".join(json.dumps({"card_id": c, "ts": t, "tokens_per_s": v}) + "\n" for c, t, v in rows).encode()
    return _parquet(pd.DataFrame({"card_id": [r[0] for r in rows], "ts": [r[1] for r in rows], "tokens_per_s": [r[2] for r in rows]}))


@pytest.mark.parametrize("far", FAR_TIMES)
@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_time_far_outside_the_calendar_is_out_of_range_not_a_crash(fmt, far, new_repo):
    r = new_repo()
    out = ingest_parsed(r, parse_bytes(_far_time_file(fmt, far), fmt, f"far.{fmt}"), settings())
    assert (out.read, out.stored) == (4, 2)
    assert out.reasons == {"out-of-range:ts": 1, "unparseable:ts": 1}
    q = quarantined(r.engine).sort_values("record_no")
    assert q["reason"].tolist() == ["out-of-range:ts", "unparseable:ts"]


@pytest.mark.parametrize("unit", ["s", "ms", "us"])
def test_parquet_timestamp_column_far_outside_the_calendar(unit, new_repo):
    import datetime as dt

    table = pa.table({
        "card_id": ["gpu-1"] * 3,
        "ts": pa.array([dt.datetime(2025, 1, 1), dt.datetime(9999, 12, 31), dt.datetime(1, 1, 1)], pa.timestamp(unit, tz="UTC")),
        "tokens_per_s": [1.0, 2.0, 3.0],
    })
    buf = io.BytesIO()
    pq.write_table(table, buf)
    out = ingest_parsed(new_repo(), parse_bytes(buf.getvalue(), "parquet", "far.parquet"), settings())
    assert (out.stored, out.reasons) == (1, {"out-of-range:ts": 2})
