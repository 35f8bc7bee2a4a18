"""A Parquet string that is not UTF-8 (Parquet does not check its strings) is a bad field, mended as the text readers
mend a bad byte: its record is quarantined with the field's reason and its raw text shows U+FFFD; the other records
are stored. Found by the 100,000-example Parquet property: pyarrow raised UnicodeDecodeError or "Wrapping … failed"
out of the reader."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleet.ingest import IngestSettings, ingest_parsed, parse_bytes
from storage import ClassSpec
from tests.storage.stored import quarantined

NOW = 1_767_225_600
T0 = 1_735_689_600


def unchecked_strings(values: list[bytes]) -> pa.Array:
    """A string array over these bytes as they are, valid UTF-8 or not (pyarrow checks nothing built this way)."""
    offsets = np.cumsum([0] + [len(v) for v in values]).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(values))])


def parquet(card_ids: list[bytes], ts: list[bytes]) -> bytes:
    table = pa.table({"card_id": unchecked_strings(card_ids), "ts": unchecked_strings(ts),
                      "tokens_per_s": pa.array([100.0 * (i + 1) for i in range(len(ts))])})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


@pytest.mark.parametrize("field, cards, times", [
    ("ts", [b"gpu-1", b"gpu-1", b"gpu-2"], [str(T0).encode(), b"173568\x80600", str(T0 + 60).encode()]),
    ("card_id", [b"gpu-1", b"gpu\xff-1", b"gpu-2"], [str(T0).encode(), str(T0 + 30).encode(), str(T0 + 60).encode()]),
])
def test_a_string_that_is_not_utf8_is_an_unparseable_field(new_repo, field, cards, times):
    r = new_repo()
    r.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    r.declare_cards({"gpu-1": "flagship", "gpu-2": "flagship"}, NOW)
    out = ingest_parsed(r, parse_bytes(parquet(cards, times), "parquet", "bad-utf8.parquet"), IngestSettings(now_ts=NOW))
    assert (out.read, out.stored, out.quarantined) == (3, 2, 1)
    assert out.reasons == {f"unparseable:{field}": 1}
    q = quarantined(r.engine)
    assert q["record_no"].tolist() == [2]
    raw = json.loads(q["raw_text"].iloc[0])
    assert "\ufffd" in raw[field] and "\x00" not in q["raw_text"].iloc[0]
