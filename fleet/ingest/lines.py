"""Text telemetry as blocks of whole lines: what CSV and JSON Lines share below their syntax.

- **Lines** end at LF, CRLF or a lone CR (where pyarrow's CSV reader ends a row);
  they are numbered from 1, the first line of the file (a CSV header is line 1).
- **Blocks** of about `BLOCK_BYTES` of whole lines are read one after another, so
  memory holds a block, never the file.
- **Bytes that are not UTF-8** past the first block (which is checked whole, before
  anything is written: a file that starts as binary is a bad file) become NUL,
  byte for byte, so lines and offsets do not move and no field holding one
  parses; a record's raw text shows each as U+FFFD.
- **A line over `MAX_LINE_BYTES`** is cut out of its block (one space stands in
  for it there) and listed in `LineBlock.long` with its first `MAX_LINE_BYTES`
  bytes, so one runaway line never fills memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

import numpy as np

BLOCK_BYTES = 4 << 20  # a block's size; tests shrink it to put block edges everywhere
FIRST_BLOCK_BYTES = 1 << 20  # the start of a text file, checked before anything is written
MAX_LINE_BYTES = 65_536

PLACEHOLDER = b" "  # what stands in a block for a line over MAX_LINE_BYTES
_SURROGATE = re.compile("[\udc80-\udcff]")


@dataclass
class LineBlock:
    """Whole lines: `data[starts[i]:ends[i]]` is line `first_no + i` without its terminator."""

    data: bytes
    first_no: int
    starts: np.ndarray
    ends: np.ndarray
    long: dict[int, str] = field(default_factory=dict)  # line number -> the start of a line over MAX_LINE_BYTES

    @property
    def n_lines(self) -> int:
        return int(self.starts.size)

    def line(self, i: int) -> bytes:
        return self.data[self.starts[i] : self.ends[i]]

    def text(self, no: int) -> str:
        """The raw text of line number `no` (bytes that were not UTF-8, and NUL, shown as U+FFFD)."""
        if no in self.long:
            return self.long[no]
        return self.line(no - self.first_no).decode("utf-8", "replace").replace("\x00", "\ufffd")

    def raw_text(self, record_nos) -> list[str]:
        return [self.text(int(r)) for r in record_nos]

    def sub(self, a: int, b: int) -> LineBlock:
        """Lines a..b-1 (indices) as a block of their own (their terminators included)."""
        lo = int(self.starts[a])
        hi = int(self.starts[b]) if b < self.n_lines else len(self.data)
        first = self.first_no + a
        long = {n: t for n, t in self.long.items() if first <= n < self.first_no + b}
        return LineBlock(self.data[lo:hi], first, self.starts[a:b] - lo, self.ends[a:b] - lo, long)


def line_bounds(data: bytes, final: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """Starts and ends of the whole lines in `data`, and where the unfinished rest begins. With `final`, the
    rest is a last line without a terminator; otherwise a trailing CR waits for a possible LF."""
    buf = np.frombuffer(data, dtype=np.uint8)
    if b"\r" not in data:  # the common case: LF only
        term = np.flatnonzero(buf == 10)
        starts = np.concatenate(([0], term[:-1] + 1)) if term.size else np.zeros(0, dtype=np.int64)
        ends, rest = term, int(term[-1] + 1) if term.size else 0
        if final and rest < buf.size:
            starts, ends, rest = np.append(starts, rest), np.append(ends, buf.size), buf.size
        return starts.astype(np.int64), ends.astype(np.int64), rest
    lf = buf == 10
    cr = buf == 13
    lone_cr = cr.copy()
    lone_cr[:-1] &= ~lf[1:]
    if not final and buf.size and cr[-1]:
        lone_cr[-1] = False  # maybe the first half of a CRLF
    term = np.flatnonzero(lf | lone_cr)
    starts = np.concatenate(([0], term + 1))[:-1] if term.size else np.zeros(0, dtype=np.int64)
    ends = term.copy()
    crlf = lf[term] & (term > 0)
    crlf[crlf] = cr[term[crlf] - 1]
    ends[crlf] -= 1
    rest = int(term[-1] + 1) if term.size else 0
    if final and rest < buf.size:
        starts = np.append(starts, rest)
        ends = np.append(ends, buf.size)
        rest = buf.size
    return starts.astype(np.int64), ends.astype(np.int64), rest


def clean_utf8(data: bytes) -> bytes:
    """`data` with every byte that is not part of valid UTF-8 replaced by NUL (same length)."""
    try:
        data.decode("utf-8")
        return data
    except UnicodeDecodeError:
        pass
    return _SURROGATE.sub("\x00", data.decode("utf-8", "surrogateescape")).encode("utf-8")


def utf8_tail(data: bytes) -> int:
    """How many bytes at the end of `data` are an unfinished UTF-8 sequence (0 to 3)."""
    for back in range(1, min(3, len(data)) + 1):
        b = data[-back]
        if b < 0x80:
            return 0
        if b >= 0xC0:
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return back if need > back else 0
    return 0


def first_utf8_error(data: bytes, complete: bool) -> int | None:
    """The offset of the first byte of `data` that is not UTF-8 (None if all are; an unfinished sequence at the
    end counts only when `data` is `complete`)."""
    try:
        data.decode("utf-8")
        return None
    except UnicodeDecodeError as err:
        if not complete and err.start >= len(data) - utf8_tail(data) and err.reason == "unexpected end of data":
            return None
        return err.start


def line_blocks(f: BinaryIO, first_no: int, block_bytes: int | None = None) -> Iterator[LineBlock]:
    """Read `f` from where it stands to its end as blocks of whole lines, the first numbered `first_no`."""
    size = block_bytes or BLOCK_BYTES
    pending = b""  # the unfinished last line so far
    carry = b""  # an unfinished UTF-8 sequence at the end of the last read
    skipping: str | None = None  # inside a line over MAX_LINE_BYTES: its start, kept as its raw text
    no = first_no
    while True:
        chunk = f.read(size)
        final = not chunk
        raw = carry + chunk
        tail = 0 if final else utf8_tail(raw)
        carry = raw[len(raw) - tail :]
        data = clean_utf8(raw[: len(raw) - tail])
        long: dict[int, str] = {}
        if skipping is not None:
            data = pending + data  # at most a CR that may be the long line's terminator
            starts, ends, _ = line_bounds(data, final)
            if not starts.size and not final:
                pending = b"\r" if data.endswith(b"\r") else b""
                continue  # still inside the long line
            # the long line ends here (or at the end of the file): an empty line heading this block
            rest = data[int(ends[0]) + _terminator_len(data, int(ends[0])) :] if starts.size else b""
            data, long, skipping = PLACEHOLDER + b"\n" + rest, {no: skipping}, None
        else:
            data = pending + data
        starts, ends, rest = line_bounds(data, final)
        pending = data[rest:]
        if len(pending) - pending.endswith(b"\r") > MAX_LINE_BYTES:  # an unfinished line already too long: skip to its end
            skipping, pending = _cut_text(pending), b"\r" if pending.endswith(b"\r") else b""
        if starts.size:
            block = LineBlock(data[:rest], no, starts, ends, long)
            if ((ends - starts) > MAX_LINE_BYTES).any():
                block = _cut_long(block)
            no += block.n_lines
            yield block
        if final:
            if skipping is not None:
                yield LineBlock(PLACEHOLDER + b"\n", no, np.zeros(1, np.int64), np.ones(1, np.int64), {no: skipping})
            return


def _terminator_len(text: bytes, end: int) -> int:
    if text[end : end + 2] == b"\r\n":
        return 2
    return 1 if end < len(text) else 0


def _cut_text(line: bytes) -> str:
    return line[:MAX_LINE_BYTES].decode("utf-8", "ignore").replace("\x00", "\ufffd") + "\u2026"


def _cut_long(block: LineBlock) -> LineBlock:
    """The block with each line over MAX_LINE_BYTES cut to one space (a blank would join a lone CR before it
    into a CRLF), its terminator kept, and listed in `long`."""
    parts, long = [], dict(block.long)
    starts, ends = block.starts.copy(), block.ends.copy()
    at, shift = 0, 0
    for i in np.flatnonzero((block.ends - block.starts) > MAX_LINE_BYTES):
        s0, e0 = int(block.starts[i]), int(block.ends[i])
        parts.append(block.data[at:s0])
        parts.append(PLACEHOLDER)
        long[block.first_no + int(i)] = _cut_text(block.data[s0:e0])
        starts[i] = s0 - shift
        ends[i] = starts[i] + len(PLACEHOLDER)
        shift += (e0 - s0) - len(PLACEHOLDER)
        starts[i + 1 :] = block.starts[i + 1 :] - shift
        ends[i + 1 :] = block.ends[i + 1 :] - shift
        at = e0
    parts.append(block.data[at:])
    return LineBlock(b"".join(parts), block.first_no, starts, ends, long)
