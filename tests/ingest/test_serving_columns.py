"""Telemetry's serving columns (`batch_mean`, `tpot_s`, `ttft_s`, `ttft_ok_share`): read from CSV, JSON Lines and
Parquet into `serving_samples`, a file without them read as before, and a bad value quarantined with its reason
while the rest of the file is stored."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings as hsettings
from hypothesis import strategies as st

from fleet.ingest import IngestSettings, ingest_parsed, parse_bytes
from storage import ClassSpec
from tests.storage.stored import quarantined

NOW = 1_767_225_600
T0 = 1_735_689_600
HEADER = "card_id,ts,tokens_per_s,batch_mean,tpot_s,ttft_s,ttft_ok_share"

CASES = [  # (the line after the card and ts, its reason or None when stored)
    ("1000,32,0.03,0.4,0.99", None),
    ("1000,40,0.035,,", None),  # no ttft: the record and its batch and tpot stored
    ("1000,,,,", None),  # none of them: the sample alone
    ("1000,0,0.02,0.3,1", None),  # an idle card: batch zero
    ("1000,-1,0.03,,", "negative:batch_mean"),
    ("1000,many,0.03,,", "unparseable:batch_mean"),
    ("1000,32,0,,", "out-of-range:tpot_s"),
    ("1000,32,-0.01,,", "out-of-range:tpot_s"),
    ("1000,32,inf,,", "non-finite:tpot_s"),
    ("1000,32,0.03,0,", "out-of-range:ttft_s"),
    ("1000,32,0.03,0.4,1.2", "out-of-range:ttft_ok_share"),
]


@pytest.fixture
def repo(new_repo):
    r = new_repo()
    r.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    r.declare_cards({"gpu-1": "flagship"}, NOW)
    return r


def _ingest(repo, data: bytes, fmt: str):
    return ingest_parsed(repo, parse_bytes(data, fmt, f"test.{fmt}"), IngestSettings(now_ts=NOW))


def _csv() -> str:
    return HEADER + "\n" + "\n".join(f"gpu-1,{T0 + 60 * i},{line}" for i, (line, _) in enumerate(CASES)) + "\n"


def _stored(repo) -> dict[int, tuple]:
    got = repo.serving_samples(T0, T0 + 3600)
    return {int(t): tuple(float(got[c][i]) for c in ("batch_mean", "tpot_s", "ttft_s", "ttft_ok_share"))
            for i, t in enumerate(got["ts"])}


def test_each_bad_serving_value_is_quarantined_with_its_reason_and_the_rest_stored(repo):
    out = _ingest(repo, _csv().encode(), "csv")
    bad = [why for _, why in CASES if why]
    assert out.stored == len(CASES) - len(bad) == repo.sample_count()
    assert out.reasons == {why: bad.count(why) for why in bad}
    q = quarantined(repo.engine)
    assert sorted(q["reason"]) == sorted(bad)
    row = q[q["reason"] == "negative:batch_mean"].iloc[0]
    assert row["raw_text"] == f"gpu-1,{T0 + 240},1000,-1,0.03,," and row["record_no"] == 6
    stored = _stored(repo)
    assert sorted(stored) == [T0, T0 + 60, T0 + 180]  # the record with none of them has no row
    assert stored[T0] == (32.0, 0.03, 0.4, 0.99)
    assert stored[T0 + 60][:2] == (40.0, 0.035) and np.isnan(stored[T0 + 60][2:]).all()
    again = _ingest(repo, _csv().encode(), "csv")  # the same file again: nothing stored twice, nothing lost
    assert (again.stored, again.quarantined) == (0, len(bad))
    assert _stored(repo).keys() == stored.keys() and _stored(repo)[T0] == stored[T0]


def test_a_file_without_them_reads_as_before(repo):
    out = _ingest(repo, f"card_id,ts,tokens_per_s\ngpu-1,{T0},1000\n".encode(), "csv")
    assert (out.stored, out.quarantined) == (1, 0)
    assert repo.serving_samples(T0, T0 + 3600)["ts"].size == 0


def test_json_lines_and_parquet_carry_them_the_same(repo):
    records = [{"card_id": "gpu-1", "ts": T0 + 60 * i, "tokens_per_s": 1000.0, "batch_mean": float(8 * i), "tpot_s": 0.02 + 0.001 * i}
               for i in range(4)]
    records.append({"card_id": "gpu-1", "ts": T0 + 600, "tokens_per_s": 1000.0, "batch_mean": -2.0})
    out = _ingest(repo, "\n".join(json.dumps(r) for r in records).encode(), "jsonl")
    assert (out.stored, out.reasons) == (4, {"negative:batch_mean": 1})
    buf = io.BytesIO()
    table = pa.table({"card_id": ["gpu-1"] * 3, "ts": [T0 + 1200, T0 + 1260, T0 + 1320], "tokens_per_s": [900.0] * 3,
                      "batch_mean": [10.0, 12.0, None], "tpot_s": [0.025, -0.1, None]})
    pq.write_table(table, buf)
    out = _ingest(repo, buf.getvalue(), "parquet")
    assert (out.stored, out.reasons) == (2, {"out-of-range:tpot_s": 1})
    stored = _stored(repo)
    assert [stored[T0 + 60 * i][:2] for i in range(4)] == [(8.0 * i, pytest.approx(0.02 + 0.001 * i)) for i in range(4)]
    assert stored[T0 + 1200][:2] == (10.0, 0.025) and T0 + 1320 not in stored


@given(batch=st.lists(st.one_of(st.floats(-1e3, 1e3), st.none()), min_size=1, max_size=20),
       tpot=st.lists(st.one_of(st.floats(-1.0, 1.0), st.none()), min_size=1, max_size=20))
@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_record_is_stored_exactly_when_its_batch_and_tpot_are_in_range(new_repo, batch, tpot):
    repo = new_repo()
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    n = min(len(batch), len(tpot))
    lines = [f"gpu-1,{T0 + 60 * i},100,{'' if batch[i] is None else repr(batch[i])},{'' if tpot[i] is None else repr(tpot[i])}"
             for i in range(n)]
    out = _ingest(repo, ("card_id,ts,tokens_per_s,batch_mean,tpot_s\n" + "\n".join(lines) + "\n").encode(), "csv")
    good = [(batch[i] is None or batch[i] >= 0) and (tpot[i] is None or tpot[i] > 0) for i in range(n)]
    assert out.stored == sum(good) and out.quarantined == n - sum(good)
    given_ = [good[i] and (batch[i] is not None or tpot[i] is not None) for i in range(n)]
    assert repo.serving_samples(T0, T0 + 3600)["ts"].size == sum(given_)
