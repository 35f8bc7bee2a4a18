"""Telemetry files as records: the record's fields, the formats, and opening a source to read it batch by batch.

A record is `card_id`, `ts` (UTC; ISO 8601 or epoch seconds), `tokens_per_s`,
and optionally `busy_fraction` (0..1), `card_class`, and what the serving stack
measured beside the rate: `batch_mean` (streams, at least 0), `tpot_s` and `ttft_s`
(seconds, above 0) and `ttft_ok_share` (0..1) (`storage.values.SERVING_COLUMNS`).

Opening a source (`read_file`, `parse_bytes`) checks what makes a bad **file**
before anything is written, and raises `BadSource` naming it and what is wrong:
the suffix, that it can be read, and its start — the first MiB of a text file
(UTF-8, no NUL, a CSV header naming the known columns once each, a JSON Lines
first line that is an object), a Parquet file's footer (its columns and their
types) and first rows. The file is then read once for its digest (the identity
that makes re-ingesting it quarantine each bad record once). Its records are read
only when asked for, block by block (`Parsed.batches`), so memory holds a batch,
never the file; a fault found past the checked start is a bad record, quarantined
with its reason, wherever a record can hold it.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from fleet.core.errors import ConfigError
from fleet.ingest.csv_reader import csv_pieces, header_names
from fleet.ingest.lines import FIRST_BLOCK_BYTES, LineBlock, first_utf8_error, line_bounds
from fleet.ingest.pieces import Piece, piece_of, rebatch
from fleet.ingest.readers import first_json_line, jsonl_pieces, parquet_pieces, parquet_type_problem
from storage.values import SERVING_COLUMNS

REQUIRED = ("card_id", "ts", "tokens_per_s")
OPTIONAL = ("busy_fraction", "card_class", *SERVING_COLUMNS)
COLUMNS = REQUIRED + OPTIONAL


@dataclass(frozen=True)
class RecordSchema:
    """What a file's records hold: the columns they must have and may have. Telemetry's is `TELEMETRY`; a
    measured-demand file's (`fleet.ingest.demand`) is read by the same readers with its own."""

    what: str  # how errors name such a file: "telemetry", "demand"
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return self.required + self.optional


TELEMETRY = RecordSchema("telemetry", REQUIRED, OPTIONAL)
FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}

MIN_TS = 946_684_800  # 2000-01-01T00:00:00Z: earlier is a clock or unit error
FUTURE_SLACK_S = 86_400  # a sample stamped more than a day ahead of the clock is a clock or unit error
ABSOLUTE_MAX_TPS = 1e7  # for cards whose class has no rated rate
_READ_BYTES = 1 << 20  # the digest pass reads this much at a time

# Every reason a record can be quarantined for (the `reasons` keys of a report).
REASONS = (
    "malformed-line",  # CSV: wrong number of fields, or a quoted field left open at the line's end; any text: a line over 64 KiB
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
    "conflicting-duplicate",  # same card and second as a stored sample, different values (demand: same part and second)
    # A measured-demand record's (`fleet.ingest.demand`): its value, as a rate's, and above the pool's ceiling.
    "missing:demand_tps", "unparseable:demand_tps", "non-finite:demand_tps", "negative:demand_tps",
    "implausible:demand_tps",  # beyond the pool's demand ceiling (`fleet.ingest.demand.judge`)
    # What the serving stack measured beside the rate: a batch below zero, a time not above zero, a share outside 0..1,
    # and a histogram's sum given without its count (Prometheus: `no-count`), are no measurement.
    "unparseable:batch_mean", "non-finite:batch_mean", "negative:batch_mean",
    "unparseable:tpot_s", "non-finite:tpot_s", "out-of-range:tpot_s", "no-count:tpot_s",
    "unparseable:ttft_s", "non-finite:ttft_s", "out-of-range:ttft_s", "no-count:ttft_s",
    "unparseable:ttft_ok_share", "non-finite:ttft_ok_share", "out-of-range:ttft_ok_share", "no-count:ttft_ok_share",
)


_REASON_CODE = {why: i + 1 for i, why in enumerate(REASONS)}


class BadSource(ConfigError):
    """A whole source that cannot be ingested (format, encoding, columns, unreachable server); nothing was written
    (except for a Parquet row group that cannot be decoded deep in a file: the batches before it stay stored)."""


class Parsed:
    """A source, opened and checked, whose records are read when asked for.

    `batches(n)` reads it from the start, in batches of exactly `n` records (the
    last one fewer), each a `Piece`: the structurally sound records as arrow
    columns numbered by `record_no`, the others in `bad_no`/`bad_reason`, and
    `raw_text(record_nos)` for any record's text. `n_records` is exact for a
    Parquet file or a source built in memory; for a text file it counts the lines
    after the header, so blank lines make it a little more than the records.
    """

    def __init__(self, name: str, digest: str, n_records: int, open_pieces: Callable[[], Iterator[Piece]]):
        self.name = name
        self.digest = digest
        self.n_records = int(n_records)
        self._open_pieces = open_pieces

    def pieces(self) -> Iterator[Piece]:
        return self._open_pieces()

    def batches(self, size: int) -> Iterator[Piece]:
        return rebatch(self.pieces(), size)

    @classmethod
    def of_columns(cls, name: str, digest: str, columns: dict[str, pa.Array], record_no, bad_no=(), bad_reason=(),
                   raw_text: Callable[[Iterable[int]], list[str]] | None = None) -> Parsed:
        """A source already held in memory as columns (a Prometheus answer)."""
        piece = piece_of(columns, record_no, bad_no, bad_reason, raw_text)
        return cls(name, digest, piece.n_records, lambda: iter([piece]))


def detect_format(path: str | Path, fmt: str | None = None) -> str:
    if fmt is not None:
        if fmt not in set(FORMATS.values()):
            raise ConfigError(f"format {fmt!r}: expected one of csv, jsonl, parquet")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise BadSource(f"{str(path)!r}: unknown file type {suffix or '(none)'!r}; expected .csv, .jsonl/.ndjson or .parquet (or give --format)")
    return FORMATS[suffix]


def read_file(path: str | Path, fmt: str | None = None, name: str | None = None, schema: RecordSchema = TELEMETRY) -> Parsed:
    """Open and check a file of `schema`'s records (`BadSource` if it cannot be read as a whole); `name` is how errors
    and the ingest's records name it (default: the path)."""
    p = Path(path)
    shown = name or str(p)
    if p.is_dir():  # before its suffix is looked at: a folder has none, and is not a file of an unknown type
        raise BadSource(f"{shown!r}: is a folder, not a file (--watch {shown} --once takes every file in it)")
    kind = detect_format(shown if name else p, fmt)
    try:
        with open(p, "rb"):
            pass
    except FileNotFoundError:
        raise BadSource(f"{shown!r}: no such file") from None
    except IsADirectoryError:
        raise BadSource(f"{shown!r}: is a folder, not a file (--watch {shown} --once takes every file in it)") from None
    except OSError as err:
        raise BadSource(f"{shown!r}: cannot read ({err.strerror})") from None

    def opener():
        try:
            return open(p, "rb")
        except OSError as err:
            raise BadSource(f"{shown!r}: cannot read ({err.strerror})") from None

    return _open(opener, kind, shown, schema)


def parse_bytes(data: bytes, fmt: str, name: str = "<input>", schema: RecordSchema = TELEMETRY) -> Parsed:
    """A source held in memory, opened and checked as a file is. Raises only `BadSource` (or ConfigError for an
    unknown format name)."""
    return _open(lambda: io.BytesIO(data), fmt, name, schema)


def _open(opener: Callable[[], io.BufferedIOBase], fmt: str, name: str, schema: RecordSchema = TELEMETRY) -> Parsed:
    if fmt == "parquet":
        return _open_parquet(opener, name, schema)
    if fmt not in ("csv", "jsonl"):
        raise ConfigError(f"format {fmt!r}: expected one of csv, jsonl, parquet")
    with opener() as f:
        head = f.read(FIRST_BLOCK_BYTES)
        complete = len(head) < FIRST_BLOCK_BYTES or not f.read(1)
    if head.startswith(b"PAR1"):
        raise BadSource(f"{name!r}: is a Parquet file, not {fmt.upper()} text")
    bad = first_utf8_error(head, complete)
    if bad is not None:
        raise BadSource(f"{name!r}: not UTF-8 text (invalid byte at offset {bad})")
    if b"\x00" in head:
        raise BadSource(f"{name!r}: contains NUL bytes: binary data, not {fmt.upper()} text")
    bom = 3 if head.startswith(b"\xef\xbb\xbf") else 0
    body = head[bom:]
    starts, ends, _ = line_bounds(body, complete)
    digest, n_lines = _digest(opener)
    if fmt == "csv":
        if not starts.size or ends[0] == starts[0]:
            what = "empty first line" if complete or starts.size else f"first line over {FIRST_BLOCK_BYTES:,} bytes"
            raise BadSource(f"{name!r}: {what}; a CSV {schema.what} file starts with a header line ({', '.join(schema.required)})")
        names = header_names(body[: ends[0]].decode("utf-8"))
        _check_columns(names, name, schema)
        start = bom + int(ends[0]) + (2 if body[ends[0] : ends[0] + 2] == b"\r\n" else 1)

        def csv_stream() -> Iterator[Piece]:
            with opener() as f:
                f.seek(start)
                yield from csv_pieces(f, names, 2)

        return Parsed(name, digest, max(n_lines - 1, 0), csv_stream)
    first = first_json_line(LineBlock(body, 1, starts, ends)) if starts.size else None
    if first is None and not complete and not starts.size:
        raise BadSource(f"{name!r}: first line over {FIRST_BLOCK_BYTES:,} bytes; JSON Lines has one object per line")
    if first is not None and not _is_json_object(first):
        # The first record decides whether this is JSON Lines at all (a CSV named .jsonl is a bad file, not
        # a file of bad records); later lines that fail are quarantined one by one.
        raise BadSource(f"{name!r}: the first line is not a JSON object; JSON Lines has one object per line")

    def jsonl_stream() -> Iterator[Piece]:
        with opener() as f:
            f.seek(bom)
            yield from jsonl_pieces(f, 1, fields=schema.columns)

    return Parsed(name, digest, n_lines, jsonl_stream)


def _is_json_object(text: str) -> bool:
    import json

    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def _digest(opener: Callable[[], io.BufferedIOBase]) -> tuple[str, int]:
    """The source's SHA-256 and its number of lines (never fewer: a CRLF split between two reads counts as two
    line ends), in one pass of `_READ_BYTES` reads."""
    h = hashlib.sha256()
    n = 0
    last = b""
    with opener() as f:
        while chunk := f.read(_READ_BYTES):
            h.update(chunk)
            n += chunk.count(b"\n")
            if b"\r" in chunk:
                n += chunk.count(b"\r") - chunk.count(b"\r\n")
            last = chunk[-1:]
    return h.hexdigest(), n + (1 if last and last not in b"\r\n" else 0)


def _open_parquet(opener: Callable[[], io.BufferedIOBase], name: str, schema: RecordSchema = TELEMETRY) -> Parsed:
    import pyarrow.parquet as pq

    errors = (pa.ArrowException, OSError, ValueError, TypeError, IndexError, EOFError)
    with opener() as f:
        try:
            pf = pq.ParquetFile(f)
            arrow_schema = pf.schema_arrow
        except errors as err:
            raise BadSource(f"{name!r}: not a readable Parquet file ({_first_line(err)})") from None
        header = list(arrow_schema.names)
        _check_columns(header, name, schema)
        for c in header:
            problem = parquet_type_problem(c, arrow_schema.field(c).type)
            if problem:
                raise BadSource(f"{name!r}: {problem}")
        try:
            next(pf.iter_batches(batch_size=1024, columns=header, use_threads=False), None)
        except errors as err:
            raise BadSource(f"{name!r}: not a readable Parquet file ({_first_line(err)})") from None
        n = pf.metadata.num_rows
    digest, _ = _digest(opener)

    def stream() -> Iterator[Piece]:
        with opener() as f2:
            yield from parquet_pieces(pq.ParquetFile(f2), header, name, BadSource)

    return Parsed(name, digest, n, stream)


def _first_line(err: BaseException) -> str:
    text = str(err)
    return text.splitlines()[0] if text else type(err).__name__


def _check_columns(header: list[str], name: str, schema: RecordSchema = TELEMETRY) -> None:
    missing = [c for c in schema.required if c not in header]
    unknown = [c for c in header if c not in schema.columns]
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
        optionally = f", optionally {', '.join(schema.optional)}" if schema.optional else ""
        raise BadSource(f"{name!r}: {'; '.join(problems)} (expected {', '.join(schema.required)}{optionally})")

