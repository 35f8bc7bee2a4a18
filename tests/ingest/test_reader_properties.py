"""Properties of the CSV, JSON Lines and Parquet readers on arbitrary input: only `BadSource` escapes (a bad file),
every bad record is quarantined with a known reason and its line, the counts add up, and where the reader's block
edges fall changes nothing.

Each property runs a few examples in every run and 100,000 under `pytest -m slow` (see props.py). The ingest
here stores into a counting stand-in for the store, so an example costs the readers and the judge, not SQLite
(the SQLite path has its own properties in test_ingest_properties.py).
"""

from __future__ import annotations

import io
import json
from collections import Counter
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from fleet.ingest import REASONS, BadSource, IngestSettings, ingest_parsed, lines, parse_bytes, readers
from storage.values import BatchOutcome, CardInfo, ClassSpec
from tests.ingest.props import fast_and_slow

NOW = 1_767_225_600
T0 = 1_735_689_600


class CountingStore:
    """What `ingest_parsed` needs of a store, in memory: it registers cards and counts what it is given."""

    def __init__(self):
        self._cards = {f"gpu-{i}": CardInfo(i + 1, f"gpu-{i}", "flagship", 6000.0) for i in range(3)}
        self.quarantined: list[tuple[int, str, str]] = []
        self.stored = 0

    def begin_run(self, source, digest, now_ts) -> int:  # noqa: ANN001
        return 1

    def cards(self):
        return dict(self._cards)

    def classes(self):
        return {"flagship": ClassSpec("flagship", 6000.0, 2690.0)}

    def write_batch(self, origin, samples, rejected, register, now_ts, raw_text_of=None,  # noqa: ANN001
                    duplicates_in_batch=0) -> BatchOutcome:
        new = tuple(CardInfo(len(self._cards) + i + 1, k, c, None) for i, (k, c) in enumerate(register.items()))
        self._cards.update({c.card_key: c for c in new})
        assert len(rejected.raw_text) == len(rejected.record_no) == len(rejected.reason)
        self.quarantined.extend(zip(rejected.record_no, rejected.reason, rejected.raw_text))
        self.stored += len(samples)
        n = len(samples)
        return BatchOutcome(n + len(rejected) + duplicates_in_batch, n, duplicates_in_batch, len(rejected), dict(Counter(rejected.reason)), new)

    def finish_run(self, run_id, now_ts) -> None:  # noqa: ANN001
        pass


@contextmanager
def blocks_of(size: int | None):
    saved = lines.BLOCK_BYTES
    lines.BLOCK_BYTES = size or saved
    try:
        yield
    finally:
        lines.BLOCK_BYTES = saved


def ingest(data: bytes, fmt: str, batch: int = 5, block_bytes: int | None = None):
    """(the report, what was stored and quarantined), or None for a bad file; nothing but BadSource may escape."""
    with blocks_of(block_bytes):
        try:
            parsed = parse_bytes(data, fmt, f"prop.{fmt}")
        except BadSource as err:
            assert str(err).startswith(f"'prop.{fmt}': "), "a bad file's error names it"
            assert "\n" not in str(err), "one line"
            return None
        store = CountingStore()
        out = ingest_parsed(store, parsed, IngestSettings(now_ts=NOW, batch_records=batch))
    assert out.read == out.stored + out.duplicates + out.quarantined <= parsed.n_records
    assert sum(out.reasons.values()) == out.quarantined == len(store.quarantined)
    assert set(out.reasons) <= set(REASONS)
    nos = [no for no, _, _ in store.quarantined]
    assert len(set(nos)) == len(nos), "a record is quarantined once"
    for no, _, raw in store.quarantined:
        assert isinstance(raw, str) and "\x00" not in raw
        if fmt != "parquet":
            assert 1 <= no <= max(parsed.n_records, 1) + 1
    return out, sorted(store.quarantined)


# -- CSV --------------------------------------------------------------------------------

HEADERS = st.sampled_from([
    b"card_id,ts,tokens_per_s\n", b"card_id,ts,tokens_per_s,busy_fraction\r\n", b'"ts",card_id,tokens_per_s,card_class\n',
    b"\xef\xbb\xbfcard_id,ts,tokens_per_s\n", b"card_id,ts\n", b"",
])
CSV_PIECES = st.lists(st.one_of(
    st.sampled_from([",", '"', '""', "\n", "\r", "\r\n", " ", "gpu-1", "gpu-2", str(T0), "2025-01-01T00:00:00Z", "9999-12-31",
                     "0.5", "-1", "nan", "1e12", "x", "\x00", "\ufeff", ",,,,", '"a,b"']),
    st.text(max_size=8),
), max_size=60).map(lambda parts: "".join(parts).encode("utf-8"))
CSV_BODY = st.one_of(CSV_PIECES, st.binary(max_size=300))


def _csv_body(head, body, block_bytes, batch):
    """Arbitrary CSV: only BadSource escapes, counts add up, and neither block edges nor batch size change a thing."""
    whole = ingest(head + body, "csv", batch=7)
    cut = ingest(head + body, "csv", batch=batch, block_bytes=block_bytes)
    if whole is None or cut is None:
        assert whole is None and cut is None
        return
    assert whole[1] == cut[1]
    assert (whole[0].read, whole[0].stored, whole[0].reasons) == (cut[0].read, cut[0].stored, cut[0].reasons)


test_csv_reader, test_csv_reader_100k = fast_and_slow(
    _csv_body, head=HEADERS, body=CSV_BODY, block_bytes=st.integers(1, 40), batch=st.integers(1, 9))


# -- JSON Lines -------------------------------------------------------------------------

JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=12),
                        st.sampled_from(["gpu-1", str(T0), T0, "2025-01-01T00:00:00Z", "0001-01-01", 0.5, 7000.0]),
                        st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
JSON_OBJECTS = st.dictionaries(st.sampled_from(["card_id", "ts", "tokens_per_s", "busy_fraction", "card_class", "colour"]), JSON_VALUES, max_size=6)
JSON_LINES = st.lists(st.one_of(
    JSON_OBJECTS.map(lambda o: json.dumps(o).encode()),
    st.sampled_from([b"", b"   ", b"[1]", b"{", b"null", b'"x"', b"\xff\xfe", b"{\"card_id\": \"\x00\"}"]),
    st.binary(max_size=20),
), max_size=25)


def _jsonl_body(first, rest, sep, block_bytes):
    """Arbitrary JSON Lines: only BadSource escapes, counts add up, block edges change nothing."""
    data = sep.join([json.dumps(first).encode(), *rest])
    whole = ingest(data, "jsonl")
    cut = ingest(data, "jsonl", block_bytes=block_bytes)
    assert (whole is None) == (cut is None)
    if whole is not None:
        assert whole[1] == cut[1] and whole[0].reasons == cut[0].reasons


test_jsonl_reader, test_jsonl_reader_100k = fast_and_slow(
    _jsonl_body, first=st.one_of(JSON_OBJECTS, JSON_VALUES), rest=JSON_LINES, sep=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    block_bytes=st.integers(1, 64))


# -- Parquet ----------------------------------------------------------------------------

TYPES = st.sampled_from(["string", "large_string", "int64", "float64", "ts_s", "ts_ms_utc", "ts_ns", "null", "bool", "list", "decimal"])


def _column(kind: str, values: list) -> pa.Array:
    n = len(values)
    ints = [None if v is None else int(v) for v in values]
    if kind in ("string", "large_string"):
        return pa.array([None if v is None else str(v) for v in values], pa.string() if kind == "string" else pa.large_string())
    if kind == "int64":
        return pa.array([None if v is None else max(min(v, 2**62), -(2**62)) for v in ints], pa.int64())
    if kind == "float64":
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    if kind.startswith("ts_"):
        unit, tz = kind.split("_")[1], "UTC" if kind.endswith("utc") else None
        top = 2**52 if unit == "s" else 2**62  # Parquet stores seconds as milliseconds
        return pa.array([None if v is None else max(min(v, top), -top) for v in ints], pa.int64()).cast(pa.timestamp(unit, tz))
    if kind == "null":
        return pa.nulls(n)
    if kind == "bool":
        return pa.array([None if v is None else bool(v) for v in values], pa.bool_())
    if kind == "decimal":
        return pa.array([None if v is None else max(min(v, 10**17), -(10**17)) for v in ints], pa.int64()).cast(pa.decimal128(38, 2))
    return pa.array([None if v is None else [float(v)] for v in values], pa.list_(pa.float64()))


PARQUET_VALUES = st.one_of(st.none(), st.integers(-(2**64), 2**64), st.sampled_from([T0, T0 + 60, 5800, 0, -1, 10**18]))


@st.composite
def parquet_files(draw) -> bytes:
    names = draw(st.lists(st.sampled_from(["card_id", "ts", "tokens_per_s", "busy_fraction", "card_class", "colour"]), min_size=1, max_size=6, unique=True))
    n = draw(st.integers(0, 30))
    table = pa.table({name: _column(draw(TYPES), draw(st.lists(PARQUET_VALUES, min_size=n, max_size=n))) for name in names})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=draw(st.integers(1, 40)))
    data = bytearray(buf.getvalue())
    for at, byte in draw(st.lists(st.tuples(st.integers(0, max(len(data) - 1, 0)), st.integers(0, 255)), max_size=3)):
        data[at] = byte  # a few bytes corrupted, sometimes
    return bytes(data)


def _parquet_body(data, batch_rows):
    """Arbitrary Parquet files (any columns of any types, some corrupted): only BadSource escapes, counts add up."""
    saved = readers.PARQUET_BATCH_ROWS
    readers.PARQUET_BATCH_ROWS = batch_rows
    try:
        out = ingest(data, "parquet", batch=4)
    finally:
        readers.PARQUET_BATCH_ROWS = saved
    if out is not None:
        assert np.all(np.diff([no for no, _, _ in out[1]]) > 0)


test_parquet_reader, test_parquet_reader_100k = fast_and_slow(_parquet_body, data=parquet_files(), batch_rows=st.integers(1, 16))


def _any_bytes_body(data, fmt):
    """Bytes that are no telemetry file at all, in any format: only BadSource, or records quarantined."""
    ingest(data, fmt)


test_any_bytes, test_any_bytes_100k = fast_and_slow(_any_bytes_body, data=st.binary(max_size=200), fmt=st.sampled_from(["csv", "jsonl", "parquet"]))
