"""Telemetry ingest: parse a source, judge every record, store each batch in one transaction.

A record is `card_id`, `ts` (UTC; ISO 8601 or epoch seconds), `tokens_per_s`,
and optionally `busy_fraction` (0..1) and `card_class`. Sources are CSV, JSON
Lines and Parquet files, a drop folder of such files, and a Prometheus
server's range query.

What happens to bad input:
- A bad **record** is quarantined with its raw text, its record number (the
  line number in a text file, the row number in a Parquet file) and a reason
  from `REASONS`; the valid records around it are stored.
- A bad **file** (unknown format, not UTF-8, binary, not Parquet, a JSON Lines file whose first line is not an object, missing or
  unknown columns) raises `BadSource` naming the file and what is wrong, before
  anything is written: it changes nothing.
- A bad **config** (pool file, option) raises `fleet.config.ConfigError`; nothing is written.
- A **crash** mid-write loses at most the batch in flight (its transaction rolls
  back); running the same ingest again stores what is missing, and the
  (card_id, ts) key makes the samples already stored duplicates. A run whose
  last batch did not commit stays without `finished_ts` in `ingest_runs`.

Counts always add up: read = stored + duplicates + quarantined.

Parsing and judging are pure functions of bytes and a card directory; only
`ingest_parsed` talks to the store, through `storage.Repository`.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fleet.config import ConfigError, read_toml
from storage.repository import CardInfo, ClassSpec, Rejected, Repository, SampleBatch

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


# -- settings and the pool --------------------------------------------------------


@dataclass(frozen=True)
class IngestSettings:
    """How records are judged. `now_ts` is the clock's time (passed in, never read here)."""

    now_ts: int
    strict: bool = False  # unknown cards are quarantined (True) or registered on first sight (False)
    default_class: str = "unassigned"  # class of a card registered on first sight whose record names none
    plausible_factor: float = 5.0  # a rate above this × the class's rated rate is implausible
    batch_records: int = 100_000

    def __post_init__(self) -> None:
        if not self.plausible_factor > 0:
            raise ConfigError(f"plausible factor {self.plausible_factor}: must be above 0")
        if self.batch_records < 1:
            raise ConfigError(f"batch size {self.batch_records}: must be at least 1")
        if not self.default_class.strip():
            raise ConfigError("default class: must not be empty")

    @property
    def max_ts(self) -> int:
        return int(self.now_ts) + FUTURE_SLACK_S


@dataclass(frozen=True)
class Pool:
    """Cards and classes declared in a pool file, and the class for cards registered on first sight."""

    classes: tuple[ClassSpec, ...] = ()
    cards: dict[str, str] = field(default_factory=dict)
    default_class: str | None = None


def load_pool(path: str | Path) -> Pool:
    """Read a pool file (TOML): `[[classes]]` name/rated_tps/rent_usd_per_month, `[[cards]]` card_id/card_class, `default_class`."""
    p = Path(path)
    where = f"pool file {str(p)!r}"
    raw = read_toml(p, where)
    unknown = set(raw) - {"classes", "cards", "default_class"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    classes = []
    for i, c in enumerate(raw.get("classes", [])):
        if not isinstance(c, dict) or set(c) - {"name", "rated_tps", "rent_usd_per_month"} or not isinstance(c.get("name"), str) or not c["name"].strip():
            raise ConfigError(f"{where}: classes[{i}] needs a name and only rated_tps, rent_usd_per_month")
        for k in ("rated_tps", "rent_usd_per_month"):
            v = c.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0):
                raise ConfigError(f"{where}: classes[{i}].{k} must be a positive number")
        classes.append(ClassSpec(c["name"].strip(), c.get("rated_tps"), c.get("rent_usd_per_month")))
    names = [c.name for c in classes]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: class names must be unique, got {names}")
    cards: dict[str, str] = {}
    for i, c in enumerate(raw.get("cards", [])):
        if not isinstance(c, dict) or set(c) != {"card_id", "card_class"} or not all(isinstance(v, str) and v.strip() for v in c.values()):
            raise ConfigError(f"{where}: cards[{i}] needs card_id and card_class (strings) and nothing else")
        key, cls = c["card_id"].strip(), c["card_class"].strip()
        if cls not in names:
            raise ConfigError(f"{where}: cards[{i}] names class {cls!r}, not one of {names}")
        if key in cards:
            raise ConfigError(f"{where}: card {key!r} declared twice")
        cards[key] = cls
    default = raw.get("default_class")
    if default is not None and (not isinstance(default, str) or default not in names):
        raise ConfigError(f"{where}: default_class must be one of the classes {names}")
    return Pool(tuple(classes), cards, default)


def declare_pool(repo: Repository, pool: Pool, now_ts: int) -> None:
    repo.declare_classes(pool.classes)
    repo.declare_cards(pool.cards, now_ts)


# -- parsed sources ---------------------------------------------------------------


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


def parse_prometheus(body: bytes, name: str, card_label: str = "instance") -> Parsed:
    """Parse a Prometheus `query_range` answer (a matrix): one record per (series, point), the card from `card_label`."""
    digest = hashlib.sha256(body).hexdigest()
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadSource(f"{name}: the answer is not JSON") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else None
        raise BadSource(f"{name}: Prometheus answered {'an error: ' + str(err) if err else 'without success'}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        kind = data.get("resultType") if isinstance(data, dict) else None
        raise BadSource(f"{name}: expected a range query's matrix, got {kind or 'something else'}")
    card, ts, tps, raw = [], [], [], []
    bad_no: list[int] = []
    bad_reason: list[str] = []
    good_no: list[int] = []
    no = 0
    for series in data["result"]:
        metric = series.get("metric") if isinstance(series, dict) else None
        points = series.get("values") if isinstance(series, dict) else None
        if not isinstance(metric, dict) or not isinstance(points, list):
            no += 1
            bad_no.append(no)
            bad_reason.append("not-an-object")
            raw.append(json.dumps(series)[:4096])
            continue
        key = metric.get(card_label)
        for point in points:
            no += 1
            raw.append(json.dumps({"metric": metric, "value": point}))
            if not (isinstance(point, list) and len(point) == 2):
                bad_no.append(no)
                bad_reason.append("not-an-object")
                continue
            good_no.append(no)
            card.append(_json_field(key))
            ts.append(_json_field(point[0]))
            tps.append(_json_field(point[1]))
    columns = {"card_id": pa.array(card, pa.string()), "ts": pa.array(ts, pa.string()), "tokens_per_s": pa.array(tps, pa.string())}

    def raw_text(record_nos: Iterable[int]) -> list[str]:
        return [raw[int(r) - 1] for r in record_nos]

    return Parsed(name, digest, columns, np.array(good_no, dtype=np.int64), np.array(bad_no, dtype=np.int64), bad_reason, raw_text)


# -- judging ----------------------------------------------------------------------

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
        text = pc.utf8_trim_whitespace(pc.filter(col.fill_null(""), pa.array(iso))).to_numpy(zero_copy_only=False)
        parsed = pd.to_datetime(pd.Series(text, dtype=object), utc=True, format="ISO8601", errors="coerce")
        good = parsed.notna().to_numpy()
        seconds = np.full(text.size, np.nan)
        if good.any():
            seconds[good] = (parsed[good] - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()
        vals[iso] = seconds
        status[np.flatnonzero(iso)[good]] = OK
    status[status == NONFINITE] = UNPARSEABLE  # "nan" is not a time
    return vals, status


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


@dataclass
class Judged:
    """One batch judged: the samples to store, the records rejected, the cards to register, the in-batch duplicates."""

    samples: SampleBatch
    rejected: Rejected
    register: dict[str, str]
    duplicates: int


def judge(
    columns: Mapping[str, pa.Array],
    record_no: np.ndarray,
    raw_text: Callable[[Iterable[int]], list[str]],
    cards: Mapping[str, CardInfo],
    classes: Mapping[str, ClassSpec],
    settings: IngestSettings,
    pre_no: Iterable[int] = (),
    pre_reason: Iterable[str] = (),
) -> Judged:
    """Judge the records of one batch against the known cards and classes (pure: nothing is written).

    The first failing check names the reason; checks run field by field, then
    card and class, then plausibility against the class's rated rate.
    """
    n = int(record_no.size)
    reason = np.zeros(n, dtype=np.int16)  # 0: no fault found yet; else 1 + index in REASONS

    def flag(mask: np.ndarray, why: str) -> None:
        reason[mask & (reason == 0)] = _REASON_CODE[why]

    key, key_st = _keys(columns["card_id"])
    flag(key_st == MISSING, "missing:card_id")
    flag(key_st == UNPARSEABLE, "unparseable:card_id")
    flag(key_st == 4, "too-long:card_id")
    ts, ts_st = _as_epoch_seconds(columns["ts"])
    flag(ts_st == MISSING, "missing:ts")
    flag(ts_st == UNPARSEABLE, "unparseable:ts")
    with np.errstate(invalid="ignore"):
        flag((ts_st == OK) & ((ts < MIN_TS) | (ts > settings.max_ts)), "out-of-range:ts")
    tps, tps_st = _as_numbers(columns["tokens_per_s"])
    flag(tps_st == MISSING, "missing:tokens_per_s")
    flag(tps_st == UNPARSEABLE, "unparseable:tokens_per_s")
    flag(tps_st == NONFINITE, "non-finite:tokens_per_s")
    with np.errstate(invalid="ignore"):
        flag((tps_st == OK) & (tps < 0), "negative:tokens_per_s")
    if "busy_fraction" in columns:
        busy, busy_st = _as_numbers(columns["busy_fraction"])
        flag(busy_st == UNPARSEABLE, "unparseable:busy_fraction")
        flag(busy_st == NONFINITE, "non-finite:busy_fraction")
        with np.errstate(invalid="ignore"):
            flag((busy_st == OK) & ((busy < 0) | (busy > 1)), "out-of-range:busy_fraction")
    else:
        busy = np.full(n, np.nan)
    if "card_class" in columns:
        named_class, cls_st = _keys(columns["card_class"])
        flag(cls_st == UNPARSEABLE, "unparseable:card_class")
        flag(cls_st == 4, "too-long:card_class")
        named_class = np.where(cls_st == OK, named_class, None)
    else:
        named_class = np.full(n, None, dtype=object)

    # Cards: known ones keep their class; unknown ones are registered (or, strict, quarantined).
    alive = reason == 0
    inv, uniq = pd.factorize(pd.Series(key, dtype=object))
    uniq = np.asarray(uniq, dtype=object)
    known = np.array([k in cards for k in uniq], dtype=bool)
    card_class = np.array([cards[k].class_name if k in cards else None for k in uniq], dtype=object)
    row_known = known[inv] if n else np.zeros(0, dtype=bool)
    if settings.strict:
        flag(alive & ~row_known, "unknown-card")
    else:
        # A new card takes the class its first valid record names, else the default class.
        first_named = {}
        for i in np.flatnonzero(alive & ~row_known):
            k = inv[i]
            if k not in first_named:
                first_named[k] = named_class[i] or settings.default_class
        for k, c in first_named.items():
            card_class[k] = c
    row_class = card_class[inv] if n else np.zeros(0, dtype=object)
    flag((named_class != None) & (row_class != None) & (named_class != row_class), "class-conflict")  # noqa: E711
    rated = np.array([classes[c].rated_tps if c in classes and classes[c].rated_tps else np.nan for c in card_class], dtype=float)
    row_rated = rated[inv] if n else np.zeros(0)
    with np.errstate(invalid="ignore"):
        cap = np.where(np.isnan(row_rated), ABSOLUTE_MAX_TPS, settings.plausible_factor * row_rated)
        flag(tps > cap, "implausible:tokens_per_s")

    valid = reason == 0
    ts_int = np.floor(np.where(valid, ts, 0)).astype(np.int64)
    # Within the batch, a record repeating an earlier one's card and second is a duplicate (same values) or a conflict.
    frame = pd.DataFrame({"k": inv, "ts": ts_int, "tps": tps, "busy": busy})[valid]
    dup = frame.duplicated(subset=["k", "ts"], keep="first")
    duplicates = 0
    dup_pos = np.zeros(n, dtype=bool)
    if dup.any():
        firsts = frame.groupby(["k", "ts"], sort=False)[["tps", "busy"]].transform("first")
        same = (frame["tps"] == firsts["tps"]) & ((frame["busy"] == firsts["busy"]) | (frame["busy"].isna() & firsts["busy"].isna()))
        conflict_pos = frame.index.to_numpy()[(dup & ~same).to_numpy()]
        same_pos = frame.index.to_numpy()[(dup & same).to_numpy()]
        reason[conflict_pos] = _REASON_CODE["conflicting-duplicate"]
        dup_pos[same_pos] = True
        duplicates = int(same_pos.size)
    store = (reason == 0) & ~dup_pos

    register = {}
    if not settings.strict:
        for k in np.unique(inv[store & ~row_known]) if n else []:
            register[str(uniq[k])] = str(card_class[k])

    bad = np.flatnonzero(reason)
    pre_no, pre_reason = list(pre_no), list(pre_reason)
    rej_no = pre_no + record_no[bad].tolist()
    rejected = Rejected(rej_no, raw_text(rej_no), pre_reason + [REASONS[c - 1] for c in reason[bad].tolist()])
    samples = SampleBatch(
        card_key=key[store],
        ts=ts_int[store],
        tokens_per_s=tps[store],
        busy_fraction=busy[store],
        record_no=record_no[store],
    )
    return Judged(samples, rejected, register, duplicates)


# -- the store --------------------------------------------------------------------


@dataclass
class IngestReport:
    """What one ingest did; `as_json()` is the `fleet ingest --json` object."""

    source: str
    run_id: int | None = None
    read: int = 0
    stored: int = 0
    duplicates: int = 0
    quarantined: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    batches: int = 0

    def add(self, read: int, stored: int, duplicates: int, quarantined: int, reasons: Mapping[str, int]) -> None:
        self.read += read
        self.stored += stored
        self.duplicates += duplicates
        self.quarantined += quarantined
        for k, v in reasons.items():
            self.reasons[k] = self.reasons.get(k, 0) + v
        self.batches += 1

    def as_json(self) -> dict:
        return {
            "source": self.source,
            "read": self.read,
            "stored": self.stored,
            "duplicates": self.duplicates,
            "quarantined": self.quarantined,
            "reasons": dict(sorted(self.reasons.items())),
        }


def ingest_parsed(
    repo: Repository,
    parsed: Parsed,
    settings: IngestSettings,
    progress: Callable[[int], None] | None = None,
) -> IngestReport:
    """Judge and store a parsed source, one transaction per batch of `settings.batch_records` records."""
    report = IngestReport(parsed.name)
    run_id = repo.begin_run(parsed.name, parsed.digest, settings.now_ts)
    report.run_id = run_id
    cards = dict(repo.cards())
    classes = dict(repo.classes())
    all_no = np.sort(np.concatenate((parsed.record_no, parsed.bad_no)))
    step = settings.batch_records
    for part, lo in enumerate(range(0, max(all_no.size, 1), step)):
        chunk = all_no[lo : lo + step]
        if chunk.size == 0:
            break
        first, last = int(chunk[0]), int(chunk[-1])
        a, b = np.searchsorted(parsed.record_no, [first, last + 1])
        c, d = np.searchsorted(parsed.bad_no, [first, last + 1])
        cols = {k: v.slice(a, b - a) for k, v in parsed.columns.items()}
        judged = judge(cols, parsed.record_no[a:b], parsed.raw_text, cards, classes, settings, parsed.bad_no[c:d].tolist(), parsed.bad_reason[c:d])
        out = repo.write_batch(
            run_id, part, first, judged.samples, judged.rejected, judged.register,
            parsed.name, parsed.digest, settings.now_ts,
            raw_text_of=parsed.raw_text, duplicates_in_batch=judged.duplicates,
        )
        for info in out.registered:
            cards[info.card_key] = info
        if out.registered:
            classes = dict(repo.classes())
        report.add(out.read, out.stored, out.duplicates, out.quarantined, out.reasons)
        if progress:
            progress(int(chunk.size))
    repo.finish_run(run_id, settings.now_ts)
    return report


def ingest_file(repo: Repository, path: str | Path, settings: IngestSettings, fmt: str | None = None,
                progress: Callable[[int], None] | None = None) -> IngestReport:
    """Parse a whole file (a bad file raises `BadSource` before anything is written), then store it batch by batch."""
    return ingest_parsed(repo, read_file(path, fmt), settings, progress)


# -- Prometheus ---------------------------------------------------------------------

DEFAULT_PROMETHEUS_QUERY = "sum by (instance) (rate(vllm:generation_tokens_total[1m]))"


def fetch_prometheus(base_url: str, query: str, start_ts: float, end_ts: float, step_s: float, timeout_s: float = 30.0) -> tuple[bytes, str]:
    """GET `/api/v1/query_range` from a Prometheus server; returns the answer's bytes and a name for the source."""
    import urllib.error
    import urllib.parse
    import urllib.request

    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"Prometheus URL {base_url!r}: expected http:// or https://")
    if not end_ts > start_ts or not step_s > 0:
        raise ConfigError(f"Prometheus range: need start < end and step > 0 (got start={start_ts}, end={end_ts}, step={step_s})")
    params = urllib.parse.urlencode({"query": query, "start": f"{start_ts:.3f}", "end": f"{end_ts:.3f}", "step": f"{step_s:g}"})
    url = base_url.rstrip("/") + "/api/v1/query_range?" + params
    name = f"prometheus {base_url.rstrip('/')} {query!r} [{int(start_ts)}, {int(end_ts)}] step {step_s:g}s"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.read(), name
    except urllib.error.HTTPError as err:
        body = err.read()
        try:
            detail = json.loads(body).get("error") or err.reason
        except (ValueError, AttributeError):
            detail = err.reason
        raise BadSource(f"{name}: HTTP {err.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise BadSource(f"{name}: cannot reach the server ({getattr(err, 'reason', err)})") from None


def ingest_prometheus(repo: Repository, base_url: str, query: str, start_ts: float, end_ts: float, step_s: float,
                      settings: IngestSettings, card_label: str = "instance") -> IngestReport:
    """Pull a range query and store it like a file: one record per series point, the card named by `card_label`."""
    body, name = fetch_prometheus(base_url, query, start_ts, end_ts, step_s)
    return ingest_parsed(repo, parse_prometheus(body, name, card_label), settings)


# -- the drop folder ------------------------------------------------------------------

PART_SUFFIXES = (".part", ".tmp", ".partial")


@dataclass
class DropResult:
    """One file taken from the drop folder: its report, or the error that sent it to failed/."""

    name: str
    report: IngestReport | None = None
    error: str | None = None


def drop_candidates(folder: Path, now_ts: float, settle_s: float) -> list[Path]:
    """Files ready to take: a known telemetry suffix, not hidden, not `*.part`, and untouched for `settle_s` seconds.

    A writer should write `NAME.csv.part` and rename it to `NAME.csv` when done
    (a rename is atomic); a file written in place is taken only once its size
    and mtime have been still for `settle_s` seconds."""
    out = []
    for p in sorted(folder.iterdir()):
        if not p.is_file() or p.name.startswith(".") or p.name.endswith(PART_SUFFIXES):
            continue
        if p.suffix.lower() not in FORMATS:
            continue
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        if now_ts - st.st_mtime >= settle_s:
            out.append(p)
    return out


def _move_aside(src: Path, dest_dir: Path) -> Path:
    dest_dir.mkdir(exist_ok=True)
    dest = dest_dir / src.name
    k = 1
    while dest.exists():
        dest = dest_dir / f"{src.stem}.{k}{src.suffix}"
        k += 1
    src.rename(dest)
    return dest


def drain_drop_folder(repo: Repository, folder: str | Path, settings_at: Callable[[], IngestSettings], settle_s: float = 2.0,
                      clock: Callable[[], float] | None = None) -> list[DropResult]:
    """Take every ready file once: claim it (rename into processing/), ingest it, move it to done/ (or failed/ with
    NAME.error.txt). Files a crash left in processing/ are taken first; the (card_id, ts) key makes that safe."""
    import time

    now = clock or time.time
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"drop folder {str(root)!r}: not a folder")
    processing, done, failed = root / "processing", root / "done", root / "failed"
    processing.mkdir(exist_ok=True)
    results: list[DropResult] = []
    claimed = [p for p in sorted(processing.iterdir()) if p.is_file()]
    for p in drop_candidates(root, now(), settle_s):
        target = processing / p.name
        if target.exists():
            continue
        try:
            before = p.stat()
            p.rename(target)  # the claim: atomic, so a file is taken once even with two watchers
        except FileNotFoundError:
            continue
        after = target.stat()
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            target.rename(p)  # still being written: leave it for a later pass
            continue
        claimed.append(target)
    for path in claimed:
        stat0 = path.stat()
        try:
            parsed = read_file(path)
            parsed.name = str(root / path.name)
            if path.stat().st_mtime_ns != stat0.st_mtime_ns:  # written to after the claim: put it back
                path.rename(root / path.name)
                continue
            report = ingest_parsed(repo, parsed, settings_at())
        except BadSource as err:
            dest = _move_aside(path, failed)
            dest.with_name(dest.name + ".error.txt").write_text(str(err) + "\n", encoding="utf-8")
            results.append(DropResult(path.name, error=str(err)))
            continue
        _move_aside(path, done)
        results.append(DropResult(path.name, report=report))
    return results
