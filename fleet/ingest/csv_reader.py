"""CSV telemetry through pyarrow's CSV parser, block by block, one record per line.

Quoting is RFC 4180's within a line: a field in double quotes may hold commas and
doubled double quotes (`"a,""b"` is `a,"b`); a double quote inside an unquoted
field is a character of it (`gpu7"` is `gpu7"`, wherever it is in the file). A
line break always ends a record, even inside quotes: no field of a telemetry record
holds one, and a stray quote must not swallow the lines after it. So a line that
leaves a quoted field open is `malformed-line` (as is one with the wrong number of
fields) and the next line is read as a record of its own: every record is one line,
numbered by it (the header is line 1; blank lines count as lines, not records).

pyarrow's parser, RFC 4180 to the letter, joins such lines into one row, and its
invalid-row handler numbers rows, not lines. Each joined row is taken apart here:
its first line is the malformed one and the lines after it are parsed again; a
block with no joined row (every block of a sound file) costs one parse.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from typing import BinaryIO, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from fleet.ingest.lines import LineBlock, line_blocks
from fleet.ingest.pieces import Piece, merge, piece_of

MALFORMED = "malformed-line"


def header_names(line: str) -> list[str]:
    """The header line's column names (RFC 4180 quoting; spaces and stray quotes around a name dropped)."""
    fields = next(csv.reader([line]), [])
    return [h.strip().strip('"').strip() for h in fields] or [""]


def csv_pieces(f: BinaryIO, names: list[str], first_no: int, block_bytes: int | None = None) -> Iterator[Piece]:
    """The records of `f` from its position on (the lines after the header), one piece per block of lines."""
    for block in line_blocks(f, first_no, block_bytes):
        yield block_piece(block, names)


def block_piece(block: LineBlock, names: list[str]) -> Piece:
    """One block of lines as records: a pyarrow parse of the block, then of the lines in each joined row."""
    parts: list[Piece] = []
    bad_no: list[int] = []
    work = [(0, block.n_lines)]
    budget = 4 * block.n_lines + 64  # lines parsed again, at most; past it, the rest are parsed one by one
    while work:
        a, b = work.pop()
        if b - a > 1 and budget < 0:
            work.extend((i, i + 1) for i in range(a, b))
            continue
        budget -= b - a
        part, bad, again = _parse_lines(block if (a, b) == (0, block.n_lines) else block.sub(a, b), names)
        if part is None:  # pyarrow refused the text: each line alone (a single line refused is malformed)
            if b - a > 1:
                work.extend((i, i + 1) for i in range(a, b))
            else:
                bad_no.append(block.first_no + a)
            continue
        parts.append(part)
        bad_no.extend(bad)
        work.extend((a + x, a + y) for x, y in again)
    bad = np.array(sorted(bad_no), dtype=np.int64)
    if len(parts) == 1:
        return Piece(parts[0].columns, parts[0].record_no, bad, [MALFORMED] * bad.size, block.raw_text)
    parts.append(piece_of({n: pa.array([], pa.string()) for n in names}, [], bad, [MALFORMED] * bad.size))
    return merge(parts, raw_text=block.raw_text)


def _parse_lines(block: LineBlock, names: list[str]) -> tuple[Piece | None, list[int], list[tuple[int, int]]]:
    """Parse a block's lines with pyarrow: the sound records (a piece), the malformed lines' numbers, and the
    line ranges (indices in `block`) of joined rows to parse again. (None, ...) if pyarrow refuses the text."""
    parsed = _read_rows(block.data, names)
    if parsed is None:
        return None, [], []
    table, invalid = parsed
    rows = _RowLines.of(block, table, invalid)
    if rows is None:
        return None, [], []
    bad, again = rows.joined_rows(block)
    long = np.zeros(block.n_lines, dtype=bool)
    for no in block.long:
        long[no - block.first_no] = True
    bad.extend(rows.malformed_single_lines(block, invalid, long))
    piece, too_long = rows.records(block, table, names, long)
    return piece, bad + too_long, again


def _read_rows(data: bytes, names: list[str]) -> tuple[pa.Table, list[tuple[int, str]]] | None:
    """pyarrow's rows of the text: the table of sound rows, and each invalid row's (row number from 1, text);
    None if pyarrow refuses the text. A byte-order mark at the start is kept as data, as any other character."""
    invalid: list[tuple[int | None, str]] = []

    def handler(row) -> str:  # noqa: ANN001
        invalid.append((row.number, row.text))
        return "skip"

    data = data if data.endswith((b"\n", b"\r")) else data + b"\n"
    bom = data.startswith(b"\xef\xbb\xbf")  # pyarrow would drop it as a byte-order mark: a blank line first keeps it data
    if bom:
        data = b"\n" + data
    try:
        table = pcsv.read_csv(
            pa.py_buffer(data),
            read_options=pcsv.ReadOptions(column_names=names, use_threads=False, block_size=max(len(data) + 1, 1 << 16)),
            parse_options=pcsv.ParseOptions(delimiter=",", quote_char='"', double_quote=True, escape_char=False,
                                              newlines_in_values=True, ignore_empty_lines=False, invalid_row_handler=handler),
            convert_options=pcsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                                  strings_can_be_null=False, quoted_strings_can_be_null=False),
        )
    except (pa.ArrowException, ValueError):
        return None
    if any(no is None for no, _ in invalid):
        return None
    if bom:
        if table.num_rows == 0 or any(no == 1 for no, _ in invalid):
            return None
        table = table.slice(1)
        invalid = [(no - 1, text) for no, text in invalid]
    return table, invalid


@dataclass(frozen=True)
class _RowLines:
    """Where each of pyarrow's rows lies in a block: invalid or sound, and the lines it spans (more than one for
    a row pyarrow joined across line breaks)."""

    is_bad: np.ndarray  # per row: pyarrow's invalid rows
    bad_rows: np.ndarray  # the invalid rows' indices, in pyarrow's order
    table_row: np.ndarray  # the row index (0-based) of each table row
    spans: np.ndarray  # lines per row
    first: np.ndarray  # each row's first line (index in the block)

    @classmethod
    def of(cls, block: LineBlock, table: pa.Table, invalid: list[tuple[int, str]]) -> "_RowLines | None":
        """The rows' lines, or None when they do not add up to the block's lines (pyarrow's text is not the block's)."""
        n_rows = table.num_rows + len(invalid)
        bad_rows = np.array([no - 1 for no, _ in invalid], dtype=np.int64)
        is_bad = np.zeros(n_rows, dtype=bool)
        if bad_rows.size and (bad_rows.min() < 0 or bad_rows.max() >= n_rows):
            return None
        is_bad[bad_rows] = True
        table_row = np.flatnonzero(~is_bad)
        spans = np.ones(n_rows, dtype=np.int64)
        n = block.n_lines
        if n_rows != n:
            spans[table_row] += _breaks(table, np.arange(table.num_rows))
            spans[bad_rows] += np.array([_text_breaks(t) for _, t in invalid], dtype=np.int64)  # typed: an empty list is float64
        elif n_rows:  # one row a line, unless the last row's quote ran over the block's last line break
            last = n_rows - 1
            spans[last] += _text_breaks(invalid[-1][1]) if is_bad[last] else int(_breaks(table.slice(table.num_rows - 1), np.zeros(1, np.int64))[0])
        first = np.cumsum(spans) - spans
        if n_rows and (first[-1] >= n or (first[-1] + spans[-1] < n)) or (not n_rows and n):
            return None
        return cls(is_bad, bad_rows, table_row, spans, first)

    def joined_rows(self, block: LineBlock) -> tuple[list[int], list[tuple[int, int]]]:
        """A joined row's first line is malformed; the lines after it are given back to be parsed again."""
        bad: list[int] = []
        again: list[tuple[int, int]] = []
        for r in np.flatnonzero(self.spans > 1):
            x = int(self.first[r])
            bad.append(block.first_no + x)
            y = min(x + int(self.spans[r]), block.n_lines)
            if y > x + 1:
                again.append((x + 1, y))
        return bad, again

    def malformed_single_lines(self, block: LineBlock, invalid: list[tuple[int, str]], long: np.ndarray) -> list[int]:
        """Invalid rows on one line are malformed, except the blank ones (only spaces), which are no records."""
        text_of = dict(zip(self.bad_rows.tolist(), (t for _, t in invalid)))
        return [block.first_no + int(self.first[r]) for r in np.flatnonzero(self.is_bad & (self.spans == 1))
                if long[int(self.first[r])] or text_of[int(r)].strip()]

    def records(self, block: LineBlock, table: pa.Table, names: list[str], long: np.ndarray) -> tuple[Piece, list[int]]:
        """Sound rows on one line are records, except an empty line (no record) and a line too long (malformed,
        its number returned)."""
        single = self.spans == 1
        lines = self.first[self.table_row[single[self.table_row]]]
        too_long = (block.first_no + lines[long[lines]]).tolist()
        keep = ~long[lines] & ((block.ends - block.starts)[lines] > 0)
        take = np.flatnonzero(single[self.table_row])[keep]
        if take.size == table.num_rows:  # every table row is a record (a sound block): no copy
            columns = {name: table.column(name).combine_chunks() for name in names}
        else:
            columns = {name: table.column(name).combine_chunks().take(pa.array(take)) for name in names}
        return piece_of(columns, block.first_no + lines[keep]), too_long


def _text_breaks(text: str) -> int:
    return text.count("\n") + text.count("\r") - text.count("\r\n")


def _breaks(table: pa.Table, rows: np.ndarray) -> np.ndarray:
    """Line breaks inside the values of the given table rows (a quoted field that ran over lines)."""
    out = np.zeros(rows.size, dtype=np.int64)
    if not rows.size:
        return out
    idx = pa.array(rows)
    for name in table.column_names:
        col = table.column(name).combine_chunks().take(idx)
        for needle, sign in (("\n", 1), ("\r", 1), ("\r\n", -1)):
            out += sign * pc.count_substring(col, needle).to_numpy(zero_copy_only=False).astype(np.int64)
    return out
