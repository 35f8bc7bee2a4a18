"""JSON Lines and Parquet telemetry, block by block.

- **JSON Lines**: one object per line, read in blocks of whole lines
  (`fleet.ingest.lines`); a line that is not JSON is `invalid-json`, JSON but not
  an object `not-an-object`, an object with a key that is no record field
  `unknown-field`, a line over 64 KiB `malformed-line`. Line numbers count every
  line of the file.
- **Parquet**: the file's row batches (`ParquetFile.iter_batches`), numbered by row
  from 1. The columns and their types are checked from the footer, before any row
  is read; a row group that cannot be decoded deep in a file stops the ingest with
  `BadSource` (the batches before it stay stored, as after a crash).
"""

from __future__ import annotations

import json
from typing import BinaryIO, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from fleet.ingest.fields import _json_field
from fleet.ingest.lines import LineBlock, clean_utf8, line_blocks
from fleet.ingest.pieces import Piece
from storage.values import SERVING_COLUMNS

RECORD_FIELDS = ("card_id", "ts", "tokens_per_s", "busy_fraction", "card_class", *SERVING_COLUMNS)
PARQUET_BATCH_ROWS = 65_536


def jsonl_pieces(f: BinaryIO, first_no: int, block_bytes: int | None = None,
                 fields: tuple[str, ...] = RECORD_FIELDS) -> Iterator[Piece]:
    for block in line_blocks(f, first_no, block_bytes):
        yield jsonl_block(block, fields)


def first_json_line(block: LineBlock) -> str | None:
    """The first line of the block that is not blank, as text (None if all are blank)."""
    for i in range(block.n_lines):
        if block.first_no + i in block.long:
            return block.long[block.first_no + i]
        text = block.line(i).decode("utf-8", "replace")
        if text.strip():
            return text
    return None


def jsonl_block(block: LineBlock, record_fields: tuple[str, ...] = RECORD_FIELDS) -> Piece:
    values: dict[str, list[str]] = {c: [] for c in record_fields}
    good_no: list[int] = []
    bad_no: list[int] = []
    bad_reason: list[str] = []
    loads = json.loads
    fields = set(record_fields)
    for i in range(block.n_lines):
        no = block.first_no + i
        if no in block.long:
            bad_no.append(no)
            bad_reason.append("malformed-line")
            continue
        text = block.line(i).decode("utf-8")
        if not text.strip():
            continue
        try:
            obj = loads(text)
        except (ValueError, RecursionError):
            bad_no.append(no)
            bad_reason.append("invalid-json")
            continue
        if not isinstance(obj, dict):
            bad_no.append(no)
            bad_reason.append("not-an-object")
            continue
        if not obj.keys() <= fields:
            bad_no.append(no)
            bad_reason.append("unknown-field")
            continue
        good_no.append(no)
        for c in record_fields:
            values[c].append(_json_field(obj.get(c)))
    columns = {c: pa.array(v, pa.string()) for c, v in values.items()}
    return Piece(columns, np.array(good_no, dtype=np.int64), np.array(bad_no, dtype=np.int64), bad_reason, block.raw_text)


# -- Parquet ----------------------------------------------------------------------------


def parquet_type_problem(name: str, t: pa.DataType) -> str | None:
    """Why a Parquet column's type cannot hold its field (None if it can)."""
    ok = pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)
    if name in ("card_id", "card_class"):
        ok = ok or pa.types.is_integer(t)
        want = "a string"
    elif name == "ts":
        ok = ok or pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t)
        want = "a timestamp, number or string"
    else:
        ok = ok or pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
        want = "a number or string"
    return None if ok else f"column {name} has type {t}, expected {want}"


def parquet_columns(batch: pa.RecordBatch) -> dict[str, pa.Array]:
    """A batch's columns as the judge reads them: strings as `string`, decimals as floats, integer names as text."""
    out = {}
    for name in batch.schema.names:
        col = batch.column(name)
        t = col.type
        if pa.types.is_large_string(t):
            col = col.cast(pa.string())
        elif pa.types.is_decimal(t):
            col = col.cast(pa.float64(), safe=False)
        elif name in ("card_id", "card_class") and pa.types.is_integer(t):
            col = col.cast(pa.string())
        out[name] = col
    return out


def parquet_pieces(pf, names: list[str], name: str, bad_source: Callable[[str], Exception]) -> Iterator[Piece]:  # noqa: ANN001
    """The row batches of an open `pyarrow.parquet.ParquetFile`, each a piece numbered by row from 1."""
    row = 0
    batches = pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=names, use_threads=False)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError, ValueError, TypeError, IndexError) as err:
            raise bad_source(f"{name!r}: the rows after row {row:,} cannot be read ({_first_line(err)}); "
                             f"the records before them were stored") from None
        n = batch.num_rows
        batch = _valid_utf8(batch)
        yield Piece(parquet_columns(batch), np.arange(row + 1, row + n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64), [],
                    _parquet_raw(batch, row))
        row += n


def _valid_utf8(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` with each string that is not UTF-8 mended as the text readers mend a line: every bad byte becomes NUL,
    so no field holding one parses (a name holding one is unparseable) and the raw text shows U+FFFD. Parquet does
    not check its strings, and pyarrow raises on the first bad one it is asked to convert."""
    cols, mended = list(batch.columns), False
    for i, col in enumerate(cols):
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            continue
        try:
            col.validate(full=True)
        except pa.ArrowInvalid:
            raw = col.cast(pa.large_binary() if pa.types.is_large_string(col.type) else pa.binary()).to_pylist()
            cols[i] = pa.array([None if v is None else clean_utf8(v).decode("utf-8") for v in raw], type=col.type)
            mended = True
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema) if mended else batch


def _parquet_raw(batch: pa.RecordBatch, offset: int) -> Callable[[Iterable[int]], list[str]]:
    def raw_text(record_nos: Iterable[int]) -> list[str]:
        idx = pa.array([int(r) - 1 - offset for r in record_nos], pa.int64())
        rows = batch.take(idx)
        try:
            dicts = rows.to_pylist()
        except (ValueError, OverflowError, pa.ArrowException):  # a timestamp no Python datetime holds
            dicts = pa.RecordBatch.from_arrays(
                [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in rows.columns], names=rows.schema.names
            ).to_pylist()
        return [json.dumps(r, default=str, allow_nan=True).replace("\\u0000", "\ufffd") for r in dicts]

    return raw_text


def _first_line(err: BaseException) -> str:
    text = str(err)
    return text.splitlines()[0] if text else type(err).__name__
