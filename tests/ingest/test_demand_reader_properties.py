"""Properties of the demand readers (CSV, JSON Lines, Parquet files and a Prometheus range answer) on arbitrary
input: only `BadSource` escapes (a file that cannot be read as a whole), every bad record is quarantined with a
known reason and its line, the counts add up, every stored sample is in the store's range, finite, non-negative and
under the pool's ceiling, and neither line ends nor block edges change what is stored.

Each property runs a few examples in every run and 100,000 under `pytest -m slow` (see props.py). The ingest stores
into a counting stand-in for the store, so an example costs the readers and the judge, not a database.
"""

from __future__ import annotations

import io
import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from fleet.ingest import REASONS, BadSource, IngestSettings, parse_bytes
from fleet.ingest.demand import DEMAND, ingest_demand, summed_matrix
from fleet.ingest.formats import MIN_TS
from storage.demand import DemandOutcome
from storage.values import CardInfo
from tests.ingest.props import fast_and_slow
from tests.ingest.test_reader_properties import blocks_of

NOW = 1_767_225_600
T0 = NOW - 86_400
RATED_TPS = 6000.0
CEILING_TPS = 2 * 5 * RATED_TPS  # two cards, plausible_factor 5


class DemandCountingStore:
    """What `ingest_demand` needs of a store, in memory: two cards rated 6,000 tok/s; it keeps what it is given."""

    def __init__(self):
        self.held: dict[int, float] = {}
        self.quarantined: list[tuple[int, str, str]] = []

    def begin_run(self, source, digest, now_ts) -> int:  # noqa: ANN001
        return 1

    def cards(self):
        return {f"gpu-{i}": CardInfo(i + 1, f"gpu-{i}", "flagship", RATED_TPS) for i in range(2)}

    def write_demand_batch(self, origin, batch, rejected, now_ts, raw_text_of, duplicates_in_batch=0,  # noqa: ANN001
                           replace=False) -> DemandOutcome:
        assert len(rejected.raw_text) == len(rejected.record_no) == len(rejected.reason)
        quarantined = list(zip(rejected.record_no, rejected.reason, rejected.raw_text))
        stored = duplicates = 0
        for no, ts, tps in zip(batch.records.tolist(), batch.ts.tolist(), batch.demand_tps.tolist()):
            if ts not in self.held:  # as the store keeps a second once: the same again a duplicate, another a conflict
                self.held[ts] = tps
                stored += 1
            elif self.held[ts] == tps:
                duplicates += 1
            else:
                quarantined.append((no, "conflicting-duplicate", raw_text_of([no])[0]))
        self.quarantined.extend(quarantined)
        return DemandOutcome(len(batch) + len(rejected) + duplicates_in_batch, stored, duplicates + duplicates_in_batch,
                             len(quarantined), dict(Counter(why for _, why, _ in quarantined)))

    def finish_run(self, run_id, now_ts) -> None:  # noqa: ANN001
        pass


def judged(parsed, part: str = "offered", batch: int = 5):
    """Ingest a parsed demand source into the counting store and check what every ingest must hold."""
    store = DemandCountingStore()
    out = ingest_demand(store, parsed, IngestSettings(now_ts=NOW, batch_records=batch), part)
    assert out.read == out.stored + out.duplicates + out.quarantined
    assert sum(out.reasons.values()) == out.quarantined == len(store.quarantined)
    assert set(out.reasons) <= set(REASONS)
    nos = [no for no, _, _ in store.quarantined]
    assert len(set(nos)) == len(nos), "a record is quarantined once"
    for _, _, raw in store.quarantined:
        assert isinstance(raw, str) and "\x00" not in raw
    for ts, tps in store.held.items():
        assert MIN_TS <= ts <= IngestSettings(now_ts=NOW).max_ts
        assert np.isfinite(tps) and abs(tps) <= CEILING_TPS and (part == "unserved" or tps >= 0)
    return out, sorted(store.held.items()), sorted(store.quarantined)


def ingest(data: bytes, fmt: str, batch: int = 5, block_bytes: int | None = None):
    """(the report, what was stored, what was quarantined), or None for a file that cannot be read as a whole."""
    with blocks_of(block_bytes):
        try:
            parsed = parse_bytes(data, fmt, f"prop.demand.{fmt}", schema=DEMAND)
        except BadSource as err:
            assert str(err).startswith(f"'prop.demand.{fmt}': "), "a bad file's error names it"
            assert "\n" not in str(err), "one line"
            return None
        return judged(parsed, batch=batch)


# -- CSV, in every line end ---------------------------------------------------------------

TIMES = st.one_of(st.sampled_from([str(T0), str(T0 + 60), str(T0 * 1000), "99999999999999999999999", str(2**63 - 1), "-5",
                                   "0", "2026-01-01T00:00:00Z", "2100-01-01T00:00:00Z", "1970-01-01", "yesterday", "",
                                   "1e400", "nan", " ", '"x,y"', '""']),
                  st.integers(-(2**70), 2**70).map(str), st.floats().map(repr))
VALUES = st.one_of(st.sampled_from(["5000", "0", "-4", "1e308", "inf", "-inf", "nan", "lots", "", "59999", "60001", "1e400",
                                    "0x10", '"7000"', "\x00", "\ufeff1"]),
                   st.floats().map(repr), st.integers(-(2**70), 2**70).map(str), st.text(max_size=6))
CSV_ROWS = st.lists(st.one_of(st.tuples(TIMES, VALUES).map(",".join), st.sampled_from(["", ",", "1,2,3", '"', "ts,demand_tps"]),
                              st.text(max_size=10)), max_size=30)
LINE_ENDS = [b"\n", b"\r\n", b"\r"]


def _no_line_break(text: str) -> bool:
    return not any(c in text for c in "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _csv_body(head, rows, end, bom, block_bytes, batch):
    """Arbitrary demand CSV in each line end: only BadSource escapes, counts add up, every stored sample is within
    bounds, and the line ends, block edges and batch size change nothing that is stored or quarantined."""
    rows = [r for r in rows if _no_line_break(r) and '"' not in r]  # one record a line, whatever its line end
    outcomes = []
    for sep in LINE_ENDS:
        data = bom + sep.join([head, *(r.encode("utf-8", "surrogatepass") for r in rows)]) + sep
        outcomes.append(ingest(data, "csv", batch=batch, block_bytes=block_bytes))
    if any(o is None for o in outcomes):
        assert all(o is None for o in outcomes)
        return
    first = outcomes[0]
    for other in outcomes[1:]:
        assert other[1] == first[1], "the same samples stored whatever the line end"
        assert [(no, why) for no, why, _ in other[2]] == [(no, why) for no, why, _ in first[2]]


test_demand_csv_reader, test_demand_csv_reader_100k = fast_and_slow(
    _csv_body, head=st.sampled_from([b"ts,demand_tps", b"demand_tps,ts", b'"ts","demand_tps"', b"ts,demand_tps,card_id",
                                     b"time,tps", b""]),
    rows=CSV_ROWS, end=st.sampled_from(LINE_ENDS), bom=st.sampled_from([b"", b"\xef\xbb\xbf"]),
    block_bytes=st.integers(1, 40), batch=st.integers(1, 9))


def _csv_bytes_body(data, end, block_bytes):
    """A demand header and then any bytes at all: only BadSource, or records quarantined; block edges change nothing."""
    body = b"ts,demand_tps" + end + data
    whole = ingest(body, "csv", batch=7)
    cut = ingest(body, "csv", batch=3, block_bytes=block_bytes)
    assert (whole is None) == (cut is None)
    if whole is not None:
        assert whole[1:] == cut[1:]


test_demand_csv_bytes, test_demand_csv_bytes_100k = fast_and_slow(
    _csv_bytes_body, data=st.binary(max_size=300), end=st.sampled_from(LINE_ENDS), block_bytes=st.integers(1, 40))


# -- JSON Lines -------------------------------------------------------------------------

JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=12),
                        st.sampled_from([T0, str(T0), T0 * 1000, "2026-01-01T00:00:00Z", 1e308, 5000.0, -4, "nan"]),
                        st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
JSON_OBJECTS = st.dictionaries(st.sampled_from(["ts", "demand_tps", "card_id"]), JSON_VALUES, max_size=3)
JSON_LINES = st.lists(st.one_of(JSON_OBJECTS.map(lambda o: json.dumps(o).encode()),
                                st.sampled_from([b"", b"   ", b"[1]", b"{", b"null", b"\xff\xfe", b'{"ts": "\x00"}']),
                                st.binary(max_size=20)), max_size=25)


def _jsonl_body(first, rest, block_bytes):
    """Arbitrary demand JSON Lines in each line end: only BadSource escapes, counts add up, samples within bounds,
    and line ends and block edges change nothing (for lines that hold no line end of their own)."""
    rest = [r for r in rest if not (b"\r" in r or b"\n" in r)]
    outcomes = [ingest(sep.join([json.dumps(first).encode(), *rest]), "jsonl", block_bytes=block_bytes) for sep in LINE_ENDS]
    if any(o is None for o in outcomes):
        assert all(o is None for o in outcomes)
        return
    for other in outcomes[1:]:
        assert other[1] == outcomes[0][1]
        assert [(no, why) for no, why, _ in other[2]] == [(no, why) for no, why, _ in outcomes[0][2]]


test_demand_jsonl_reader, test_demand_jsonl_reader_100k = fast_and_slow(
    _jsonl_body, first=st.one_of(JSON_OBJECTS, JSON_VALUES), rest=JSON_LINES, block_bytes=st.integers(1, 64))


# -- Parquet ----------------------------------------------------------------------------

PARQUET_TIMES = st.one_of(st.none(), st.integers(-(2**62), 2**62), st.sampled_from([T0, T0 + 3600, T0 * 1000, 0, -1]))
PARQUET_RATES = st.one_of(st.none(), st.floats(), st.sampled_from([5000.0, 0.0, -4.0, 1e308, 60001.0]))


@st.composite
def parquet_files(draw) -> bytes:
    n = draw(st.integers(0, 20))
    columns = {}
    for name, values in (("ts", PARQUET_TIMES), ("demand_tps", PARQUET_RATES)):
        drawn = draw(st.lists(values, min_size=n, max_size=n))
        kind = draw(st.sampled_from(["native", "string", "ts_s", "float"]))
        if kind == "string":
            columns[name] = pa.array([None if v is None else str(v) for v in drawn], pa.string())
        elif kind == "float":
            columns[name] = pa.array([None if v is None else float(v) for v in drawn], pa.float64())
        elif kind == "ts_s" and name == "ts":
            columns[name] = pa.array([None if v is None else max(min(v, 2**52), -(2**52)) for v in drawn], pa.int64()).cast(pa.timestamp("s", "UTC"))
        else:
            columns[name] = pa.array(drawn, pa.int64() if name == "ts" else pa.float64())
    if draw(st.booleans()):
        columns["colour"] = pa.array(["x"] * n)
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf, row_group_size=draw(st.integers(1, 30)))
    data = bytearray(buf.getvalue())
    for at, byte in draw(st.lists(st.tuples(st.integers(0, max(len(data) - 1, 0)), st.integers(0, 255)), max_size=3)):
        data[at] = byte  # a few bytes corrupted, sometimes
    return bytes(data)


def _parquet_body(data):
    """Arbitrary demand Parquet (some corrupted): only BadSource escapes, counts add up, samples within bounds."""
    ingest(data, "parquet", batch=4)


test_demand_parquet_reader, test_demand_parquet_reader_100k = fast_and_slow(_parquet_body, data=parquet_files())


def _any_bytes_body(data, fmt):
    """Bytes that are no demand file at all, in any format: only BadSource, or records quarantined."""
    ingest(data, fmt)


test_demand_any_bytes, test_demand_any_bytes_100k = fast_and_slow(
    _any_bytes_body, data=st.binary(max_size=200), fmt=st.sampled_from(["csv", "jsonl", "parquet"]))


# -- a Prometheus range answer ----------------------------------------------------------

POINT_VALUES = st.one_of(st.sampled_from(["5000", "NaN", "+Inf", "-Inf", "1e308", "-4", "x", ""]), st.floats().map(repr),
                         st.integers(-(2**70), 2**70), st.none(), st.booleans(), st.floats())
POINTS = st.lists(st.one_of(st.tuples(st.one_of(st.sampled_from([T0, T0 + 60, T0 * 1000, -1, "x", None, 1e400]),
                                                st.floats(), st.integers(-(2**70), 2**70)), POINT_VALUES).map(list),
                            st.sampled_from([[], [T0], "x", None, [T0, "1", "2"]])), max_size=12)
SERIES = st.lists(st.one_of(st.fixed_dictionaries({"metric": st.just({}), "values": POINTS}), st.sampled_from([None, "x", 1, {}])),
                  max_size=3)


def _matrix_body(series, part, raw):
    """Any answer a Prometheus server might give a range query: only BadSource escapes (a body that is no matrix),
    every summed point judged, what is stored within bounds (`unserved` may be negative: a queue that drains)."""
    body = raw if raw is not None else json.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}}).encode()
    try:
        parsed = summed_matrix(body, "demand prop")
    except BadSource as err:
        assert "\n" not in str(err)
        return
    judged(parsed, part=part)


test_demand_matrix, test_demand_matrix_100k = fast_and_slow(
    _matrix_body, series=SERIES, part=st.sampled_from(["offered", "unserved"]), raw=st.one_of(st.none(), st.binary(max_size=60)))
