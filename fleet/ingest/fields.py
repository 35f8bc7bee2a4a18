"""A record's fields as values: numbers, times and names from arrow columns, each with a status per record.

Vectorised over a batch's columns. The status says why a field cannot be used
(missing, unparseable, not finite, too long); `fleet.ingest.store.judge` turns
statuses into quarantine reasons. A value the source gave as the wrong JSON type
(bool, list, object) arrives as `UNPARSEABLE_TEXT`, which no parser accepts; so
does a byte that was not UTF-8 (the text readers turn it into NUL).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandas.errors import OutOfBoundsDatetime

MAX_KEY_CHARS = 200
TOO_LONG = 4  # the status of a name over MAX_KEY_CHARS

UNPARSEABLE_TEXT = "\x00"  # a JSON value of the wrong kind (bool, list, object): no parser accepts it


def _json_field(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return UNPARSEABLE_TEXT
    return repr(v) if isinstance(v, float) else str(v)


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
        vals = col.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)  # an integer past 2**53 rounds
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
        good = parsed.notna().to_numpy()
        seconds = np.full(text.size, np.nan)
        if good.any():  # a time pandas parsed at a coarser unit (`-1-1`: year -1) can overflow only here
            seconds[good] = (parsed[good] - _EPOCH).dt.total_seconds().to_numpy()
        return seconds
    except (OutOfBoundsDatetime, OverflowError):
        if text.size == 1:
            return np.array([np.inf])
        return np.concatenate((_pandas_iso_seconds(text[: text.size // 2]), _pandas_iso_seconds(text[text.size // 2 :])))
    except (ValueError, TypeError):
        if text.size == 1:
            return np.array([np.nan])
        return np.concatenate((_pandas_iso_seconds(text[: text.size // 2]), _pandas_iso_seconds(text[text.size // 2 :])))


def _keys(col: pa.Array, limit: int = MAX_KEY_CHARS) -> tuple[np.ndarray, np.ndarray]:
    """Card or class names: (object array of the trimmed name per record, status: OK, MISSING, UNPARSEABLE or TOO_LONG)."""
    n = len(col)
    if pa.types.is_null(col.type) or n == 0:
        return np.full(n, "", dtype=object), np.full(n, MISSING, dtype=np.int8)
    enc = col.fill_null("").dictionary_encode()
    names = enc.dictionary.to_pylist()
    codes = enc.indices.to_numpy(zero_copy_only=False)
    clean = np.array([s.strip() for s in names], dtype=object)
    st = np.array(
        [MISSING if not s else UNPARSEABLE if UNPARSEABLE_TEXT in s else TOO_LONG if len(s) > limit else OK for s in clean],
        dtype=np.int8,
    )
    return clean[codes], st[codes]
