"""Telemetry files as records: the record's fields, the formats, and the parsers of CSV, JSON Lines and Parquet.

A record is `card_id`, `ts` (UTC; ISO 8601 or epoch seconds), `tokens_per_s`,
and optionally `busy_fraction` (0..1) and `card_class`. A bad **file** (unknown
format, not UTF-8, binary, not Parquet, a JSON Lines file whose first line is not
an object, missing or unknown columns) raises `BadSource` naming the file and what
is wrong, before anything is written. Parsing is a pure function of bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
from datetime import datetime, timezone
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandas.errors import OutOfBoundsDatetime

from fleet.core.errors import ConfigError

REQUIRED = ("card_id", "ts", "tokens_per_s")
OPTIONAL = ("busy_fraction", "card_class")
COLUMNS = REQUIRED + OPTIONAL
FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}

MIN_TS = 946_684_800  # 2000-01-01T00:00:00Z: earlier is a clock or unit error
FUTURE_SLACK_S = 86_400  # a sample stamped more than a day ahead of the clock is a clock or unit error
MAX_KEY_CHARS = 200
MAX_LINE_BYTES = 65_536
ABSOLUTE_MAX_TPS = 1e7  # for cards whose class has no rated rate

# Every reason a record can be quarantined for (the `reasons` keys of a report).
REASONS = (
    "malformed-line",  # CSV: wrong number of fields, or a line too long
    "invalid-json",  # JSON Lines: the line is not JSON
    "not-an-object",  # JSON Lines: the line is JSON but not an object
    "unknown-field",  # JSON Lines: a key that is not a record field
    "missing:card_id", "missing:ts", "missing:tokens_per_s",
    "unparseable:card_id", "unparseable:ts", "unparseable:tokens_per_s", "unparseable:busy_fraction", "unparseable:card_class",
    "too-long:card_id", "too-long:card_class",
    "non-finite:tokens_per_s", "non-finite:busy_fraction",
    "negative:tokens_per_s",
    "out-of-range:ts", "out-of-range:busy_fraction",
    "implausible:tokens_per_s",  # above plausible_factor × the class's rated rate
    "unknown-card",  # strict: a card not declared
    "class-conflict",  # the record names a class other than the card's
    "conflicting-duplicate",  # same card and second as a stored sample, different values
)


_REASON_CODE = {why: i + 1 for i, why in enumerate(REASONS)}


class BadSource(ConfigError):
    """A whole source that cannot be ingested (format, encoding, columns, unreachable server); nothing was written."""



@dataclass
class Parsed:
    """A whole source, parsed but not judged.

    `columns` holds the structurally sound records (arrow arrays, one entry per
    record, numbered by `record_no`); `bad_no`/`bad_reason` the records that
    were not even structurally sound. `raw_text(record_nos)` gives any record's text.
    """

    name: str
    digest: str
    columns: dict[str, pa.Array]
    record_no: np.ndarray
    bad_no: np.ndarray
    bad_reason: list[str]
    raw_text: Callable[[Iterable[int]], list[str]]

    @property
    def n_records(self) -> int:
        return int(self.record_no.size + self.bad_no.size)


def detect_format(path: str | Path, fmt: str | None = None) -> str:
    if fmt is not None:
        if fmt not in set(FORMATS.values()):
            raise ConfigError(f"format {fmt!r}: expected one of csv, jsonl, parquet")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise BadSource(f"{str(path)!r}: unknown file type {suffix or '(none)'!r}; expected .csv, .jsonl/.ndjson or .parquet (or give --format)")
    return FORMATS[suffix]


def read_file(path: str | Path, fmt: str | None = None) -> Parsed:
    """Parse a telemetry file; `BadSource` if it cannot be read as a whole."""
    p = Path(path)
    kind = detect_format(p, fmt)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise BadSource(f"{str(p)!r}: no such file") from None
    except IsADirectoryError:
        raise BadSource(f"{str(p)!r}: is a folder, not a file") from None
    except OSError as err:
        raise BadSource(f"{str(p)!r}: cannot read ({err.strerror})") from None
    return parse_bytes(data, kind, str(p))


def parse_bytes(data: bytes, fmt: str, name: str = "<input>") -> Parsed:
    """Parse a whole source held in memory. Raises only `BadSource` (or ConfigError for an unknown format name)."""
    digest = hashlib.sha256(data).hexdigest()
    if fmt == "parquet":
        return _parse_parquet(data, name, digest)
    if fmt not in ("csv", "jsonl"):
        raise ConfigError(f"format {fmt!r}: expected one of csv, jsonl, parquet")
    if data.startswith(b"PAR1"):
        raise BadSource(f"{name!r}: is a Parquet file, not {fmt.upper()} text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadSource(f"{name!r}: not UTF-8 text (invalid byte at offset {err.start})") from None
    if "\x00" in text:
        raise BadSource(f"{name!r}: contains NUL bytes: binary data, not {fmt.upper()} text")
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _parse_csv(text, name, digest) if fmt == "csv" else _parse_jsonl(text, name, digest)


def _line_bounds(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive, the newline's position) of every line of a byte buffer."""
    nl = np.flatnonzero(buf == 10)
    ends = nl if (buf.size and buf[-1] == 10) or not buf.size else np.append(nl, buf.size)
    starts = np.concatenate(([0], nl + 1))[: ends.size]
    return starts, ends


def _parse_csv(text: str, name: str, digest: str) -> Parsed:
    import pyarrow.csv as pcsv

    data = text.encode("utf-8")
    buf = np.frombuffer(data, dtype=np.uint8)
    starts, ends = _line_bounds(buf)
    if starts.size == 0 or ends[0] == starts[0]:
        raise BadSource(f"{name!r}: empty first line; a CSV telemetry file starts with a header line ({', '.join(REQUIRED)})")
    header = [h.strip().strip('"').strip() for h in data[starts[0] : ends[0]].decode("utf-8").split(",")]
    _check_columns(header, name)
    n_fields = len(header)

    def line(i: int) -> str:
        return data[starts[i] : ends[i]].decode("utf-8")

    lengths = ends - starts
    commas = np.flatnonzero(buf == 44)
    per_line = np.bincount(np.searchsorted(ends, commas), minlength=ends.size)
    body = np.arange(1, ends.size)
    sound = (per_line[body] == n_fields - 1) & (lengths[body] > 0) & (lengths[body] <= MAX_LINE_BYTES)
    odd = body[~sound & (lengths[body] > 0)]
    odd_blank = np.array([not line(i).strip() for i in odd], dtype=bool)
    bad_idx = odd[~odd_blank]
    good_idx = body[sound]
    # The sound lines, copied into one buffer for the CSV reader: the runs of sound lines between the others.
    gap = np.ones(ends.size, dtype=bool)
    gap[good_idx] = False
    gap_idx = np.flatnonzero(gap)  # the header, blank and malformed lines
    after = np.append(starts[1:], buf.size)  # where each line's successor starts (its newline included)
    pieces = []
    for g0, g1 in zip(gap_idx, np.append(gap_idx[1:], ends.size)):
        if g1 > g0 + 1:
            pieces.append(data[starts[g0 + 1] : after[g1 - 1]])
    good = b"".join(pieces)
    if good and not good.endswith(b"\n"):
        good += b"\n"
    if good_idx.size:
        table = pcsv.read_csv(
            io.BytesIO(good),
            read_options=pcsv.ReadOptions(column_names=header, block_size=1 << 24),
            parse_options=pcsv.ParseOptions(quote_char=False, double_quote=False, escape_char=False, newlines_in_values=False),
            convert_options=pcsv.ConvertOptions(column_types={h: pa.string() for h in header}, strings_can_be_null=False, quoted_strings_can_be_null=False),
        )
        if table.num_rows != good_idx.size:  # never expected: every line handed over has exactly the header's fields
            raise BadSource(f"{name!r}: CSV reader found {table.num_rows} records in {good_idx.size} lines")
        columns = {h: _quoted(table.column(h).combine_chunks()) for h in header}
    else:
        columns = {h: pa.array([], pa.string()) for h in header}

    def raw_text(record_nos: Iterable[int]) -> list[str]:
        return [line(int(r) - 1) for r in record_nos]

    return Parsed(name, digest, columns, good_idx + 1, bad_idx + 1, ["malformed-line"] * int(bad_idx.size), raw_text)


def _quoted(col: pa.Array) -> pa.Array:
    """Drop surrounding double quotes from fields that have them (CSV writers quote strings at will)."""
    if len(col) and pc.any(pc.starts_with(col, '"')).as_py():
        return pc.utf8_trim(col, '"')
    return col


def _check_columns(header: list[str], name: str) -> None:
    missing = [c for c in REQUIRED if c not in header]
    unknown = [c for c in header if c not in COLUMNS]
    dup = sorted({c for c in header if header.count(c) > 1})
    problems = []
    if missing:
        problems.append(f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    if unknown:
        # Refused rather than ignored: a misspelt busy_fraction would silently make idle cards look slow.
        problems.append(f"unknown column{'s' if len(unknown) > 1 else ''} {', '.join(repr(u) for u in unknown[:5])}")
    if dup:
        problems.append(f"column{'s' if len(dup) > 1 else ''} given twice: {', '.join(dup)}")
    if problems:
        raise BadSource(f"{name!r}: {'; '.join(problems)} (expected {', '.join(REQUIRED)}, optionally {', '.join(OPTIONAL)})")


def _parse_jsonl(text: str, name: str, digest: str) -> Parsed:
    lines = text.split("\n")
    values: dict[str, list[str]] = {c: [] for c in COLUMNS}
    good_no: list[int] = []
    bad_no: list[int] = []
    bad_reason: list[str] = []
    loads = json.loads
    first = next((ln for ln in lines if ln.strip()), None)
    if first is not None:
        # The first record decides whether this is JSON Lines at all (a CSV named .jsonl is a bad file, not
        # a file of bad records); later lines that fail are quarantined one by one.
        try:
            head = loads(first)
        except (ValueError, RecursionError):
            head = None
        if not isinstance(head, dict):
            raise BadSource(f"{name!r}: the first line is not a JSON object; JSON Lines has one object per line")
    for i, ln in enumerate(lines, start=1):
        if not ln.strip():
            continue
        try:
            obj = loads(ln)
        except (ValueError, RecursionError):
            bad_no.append(i)
            bad_reason.append("invalid-json")
            continue
        if not isinstance(obj, dict):
            bad_no.append(i)
            bad_reason.append("not-an-object")
            continue
        if not obj.keys() <= set(COLUMNS):
            bad_no.append(i)
            bad_reason.append("unknown-field")
            continue
        good_no.append(i)
        for c in COLUMNS:
            values[c].append(_json_field(obj.get(c)))
    columns = {c: pa.array(v, pa.string()) for c, v in values.items()}

    def raw_text(record_nos: Iterable[int]) -> list[str]:
        return [lines[int(r) - 1] for r in record_nos]

    return Parsed(name, digest, columns, np.array(good_no, dtype=np.int64), np.array(bad_no, dtype=np.int64), bad_reason, raw_text)


_UNPARSEABLE = "\x00"  # a JSON value of the wrong kind (bool, list, object): no parser accepts it


def _json_field(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return _UNPARSEABLE
    return repr(v) if isinstance(v, float) else str(v)


def _parse_parquet(data: bytes, name: str, digest: str) -> Parsed:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError, ValueError, TypeError, IndexError) as err:
        raise BadSource(f"{name!r}: not a readable Parquet file ({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    header = list(table.column_names)
    _check_columns(header, name)
    columns: dict[str, pa.Array] = {}
    for c in header:
        col = table.column(c).combine_chunks() if table.num_rows else pa.array([], table.schema.field(c).type)
        t = col.type
        ok = pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)
        if c in ("card_id", "card_class"):
            ok = ok or pa.types.is_integer(t)
        elif c == "ts":
            ok = ok or pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t)
        else:
            ok = ok or pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
        if not ok:
            raise BadSource(f"{name!r}: column {c} has type {t}, expected {'a timestamp, number or string' if c == 'ts' else 'a number or string' if c not in ('card_id', 'card_class') else 'a string'}")
        if pa.types.is_large_string(t):
            col = col.cast(pa.string())
        if pa.types.is_decimal(t):
            col = col.cast(pa.float64())
        if c in ("card_id", "card_class") and pa.types.is_integer(t):
            col = col.cast(pa.string())
        columns[c] = col
    n = table.num_rows

    def raw_text(record_nos: Iterable[int]) -> list[str]:
        idx = pa.array([int(r) - 1 for r in record_nos], pa.int64())
        rows = table.take(idx).to_pylist()
        return [json.dumps(r, default=str, allow_nan=True) for r in rows]

    return Parsed(name, digest, columns, np.arange(1, n + 1, dtype=np.int64), np.array([], dtype=np.int64), [], raw_text)


_NUMBER = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
_NONFINITE = r"(?i)^[+-]?(nan|inf|infinity)$"
OK, MISSING, UNPARSEABLE, NONFINITE = 0, 1, 2, 3


def _as_numbers(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A column as float64 with a status per record (OK, MISSING, UNPARSEABLE, NONFINITE). Vectorised; the
    slow path (a regex over the column) runs only when the fast cast fails."""
    n = len(col)
    if pa.types.is_null(col.type):
        return np.full(n, np.nan), np.full(n, MISSING, dtype=np.int8)
    null = col.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        vals = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
        vals = np.where(null, np.nan, vals)
        status = np.where(null, MISSING, np.where(np.isfinite(vals), OK, NONFINITE)).astype(np.int8)
        return vals, status
    text = col.fill_null("")
    empty = pc.equal(pc.utf8_length(text), 0).to_numpy(zero_copy_only=False)
    try:
        vals = pc.cast(pc.if_else(pc.equal(text, ""), "nan", text), pa.float64()).to_numpy(zero_copy_only=False)
        status = np.where(np.isfinite(vals), OK, NONFINITE).astype(np.int8)
    except pa.ArrowInvalid:
        trimmed = pc.utf8_trim_whitespace(text)
        number = pc.match_substring_regex(trimmed, _NUMBER).to_numpy(zero_copy_only=False)
        nonfinite = pc.match_substring_regex(trimmed, _NONFINITE).to_numpy(zero_copy_only=False)
        usable = number | nonfinite
        vals = np.full(n, np.nan)
        if usable.any():
            picked = pc.filter(trimmed, pa.array(usable))
            vals[usable] = pc.cast(picked, pa.float64()).to_numpy(zero_copy_only=False)
        status = np.where(usable, np.where(np.isfinite(vals), OK, NONFINITE), UNPARSEABLE).astype(np.int8)
        empty = pc.equal(pc.utf8_length(trimmed), 0).to_numpy(zero_copy_only=False)
    status[empty] = MISSING
    vals = np.where(status == OK, vals, np.nan)
    return vals, status


def _as_epoch_seconds(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Timestamps as float epoch seconds (UTC) with a status per record; ISO 8601 without an offset is UTC."""
    if pa.types.is_timestamp(col.type):
        per_s = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}[col.type.unit]
        null = col.is_null().to_numpy(zero_copy_only=False)
        vals = col.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False) / per_s
        return np.where(null, np.nan, vals), np.where(null, MISSING, OK).astype(np.int8)
    vals, status = _as_numbers(col)
    iso = status == UNPARSEABLE
    if iso.any():
        seconds = _iso_seconds(pc.utf8_trim_whitespace(pc.filter(col.fill_null(""), pa.array(iso))))
        good = ~np.isnan(seconds)
        vals[iso] = seconds
        status[np.flatnonzero(iso)[good]] = OK
    status[status == NONFINITE] = UNPARSEABLE  # "nan" is not a time
    return vals, status


_EPOCH = pd.Timestamp(0, tz="UTC")
_PANDAS_YEARS = (1678, 2261)  # the years pandas' nanosecond timestamps hold whole


def _iso_seconds(text: pa.Array) -> np.ndarray:
    """ISO 8601 times as epoch seconds (NaN where not a time). A time pandas cannot hold (before 1678, after
    2261: year 1, 9999-12-31) is still a time: it gets its seconds (or +inf), so the judge finds it out of range."""
    out = np.full(len(text), np.nan)
    dated = pc.match_substring_regex(text, r"^\d{4}-\d{2}-\d{2}").to_numpy(zero_copy_only=False)
    far = np.zeros(len(text), dtype=bool)
    if dated.any():
        year = pc.cast(pc.utf8_slice_codeunits(pc.filter(text, pa.array(dated)), 0, 4), pa.int32()).to_numpy(zero_copy_only=False)
        far[np.flatnonzero(dated)] = (year < _PANDAS_YEARS[0]) | (year > _PANDAS_YEARS[1])
    strings = text.to_numpy(zero_copy_only=False)
    for i in np.flatnonzero(far):
        out[i] = _python_iso_seconds(strings[i])
    near = np.flatnonzero(~far)
    if near.size:
        out[near] = _pandas_iso_seconds(strings[near])
    return out


def _python_iso_seconds(s: str) -> float:
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        return np.nan
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return (t - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds()


def _pandas_iso_seconds(text: np.ndarray) -> np.ndarray:
    """pandas' vectorised ISO 8601 parser; a value it raises on (rather than coerces) is found by halving, and is
    a far time (+inf) when pandas says it is out of bounds, else not a time."""
    try:
        parsed = pd.to_datetime(pd.Series(text, dtype=object), utc=True, format="ISO8601", errors="coerce")
    except (OutOfBoundsDatetime, OverflowError):
        if text.size == 1:
            return np.array([np.inf])
        return np.concatenate((_pandas_iso_seconds(text[: text.size // 2]), _pandas_iso_seconds(text[text.size // 2 :])))
    except (ValueError, TypeError):
        if text.size == 1:
            return np.array([np.nan])
        return np.concatenate((_pandas_iso_seconds(text[: text.size // 2]), _pandas_iso_seconds(text[text.size // 2 :])))
    good = parsed.notna().to_numpy()
    seconds = np.full(text.size, np.nan)
    if good.any():
        seconds[good] = (parsed[good] - _EPOCH).dt.total_seconds().to_numpy()
    return seconds


def _keys(col: pa.Array, limit: int = MAX_KEY_CHARS) -> tuple[np.ndarray, np.ndarray]:
    """Card or class names: (object array of the trimmed name per record, status: OK, MISSING, UNPARSEABLE, or 4 = too long)."""
    n = len(col)
    if pa.types.is_null(col.type) or n == 0:
        return np.full(n, "", dtype=object), np.full(n, MISSING, dtype=np.int8)
    enc = col.fill_null("").dictionary_encode()
    names = enc.dictionary.to_pylist()
    codes = enc.indices.to_numpy(zero_copy_only=False)
    clean = np.array([s.strip() for s in names], dtype=object)
    st = np.array(
        [MISSING if not s else UNPARSEABLE if _UNPARSEABLE in s else 4 if len(s) > limit else OK for s in clean],
        dtype=np.int8,
    )
    return clean[codes], st[codes]
