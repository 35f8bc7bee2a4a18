"""Records in pieces: what a reader makes of one block of a source, and the batches the ingest stores.

A `Piece` holds consecutive records of a source, each named by its record number
(the line number in a text file, the row number in Parquet): the structurally
sound ones as arrow columns, the others with the reason they are not. Readers
yield pieces of whatever size their blocks give; `rebatch` cuts and joins them
into batches of exactly the ingest's batch size, so a batch (one transaction) is
the same records whatever the reader's block size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa


@dataclass
class Piece:
    """Consecutive records: `columns` (one entry per sound record, numbered by `record_no`, ascending), the
    records that were not even structurally sound (`bad_no`, `bad_reason`), and `raw_text(record_nos)`, the
    text of any of them (for quarantine)."""

    columns: Mapping[str, pa.Array]
    record_no: np.ndarray
    bad_no: np.ndarray
    bad_reason: list[str]
    raw_text: Callable[[Iterable[int]], list[str]]

    @property
    def n_records(self) -> int:
        return int(self.record_no.size + self.bad_no.size)

    @property
    def first_no(self) -> int:
        heads = [int(a[0]) for a in (self.record_no, self.bad_no) if a.size]
        return min(heads) if heads else 0

    def split(self, k: int) -> tuple[Piece, Piece | None]:
        """The first `k` records, and the rest (None when there is none)."""
        if k >= self.n_records:
            return self, None
        nos = np.sort(np.concatenate((self.record_no, self.bad_no)))
        cut = nos[k]  # the first record number of the rest
        a = int(np.searchsorted(self.record_no, cut))
        c = int(np.searchsorted(self.bad_no, cut))
        head = Piece({n: v.slice(0, a) for n, v in self.columns.items()}, self.record_no[:a], self.bad_no[:c], self.bad_reason[:c], self.raw_text)
        rest = Piece({n: v.slice(a) for n, v in self.columns.items()}, self.record_no[a:], self.bad_no[c:], self.bad_reason[c:], self.raw_text)
        return head, rest


def piece_of(columns: Mapping[str, pa.Array], record_no, bad_no=(), bad_reason=(), raw_text=None) -> Piece:
    return Piece(dict(columns), np.asarray(record_no, dtype=np.int64), np.asarray(bad_no, dtype=np.int64), list(bad_reason),
                 raw_text or (lambda nos: ["" for _ in nos]))


def merge(pieces: list[Piece], raw_text: Callable[[Iterable[int]], list[str]] | None = None) -> Piece:
    """One piece of several, in record-number order. Pieces may interleave (their numbers must not repeat) when
    `raw_text` answers for all of them; without it they must be consecutive, and each answers for its own."""
    if len(pieces) == 1 and raw_text is None:
        return pieces[0]
    names = list(pieces[0].columns)
    record_no = np.concatenate([p.record_no for p in pieces]).astype(np.int64)
    order = np.argsort(record_no, kind="stable")
    columns = {}
    for n in names:
        col = pa.concat_arrays([_plain(p.columns[n]) for p in pieces])
        columns[n] = col if _is_sorted(order) else col.take(pa.array(order))
    bad_no = np.concatenate([p.bad_no for p in pieces]).astype(np.int64)
    bad_reason = [r for p in pieces for r in p.bad_reason]
    bad_order = np.argsort(bad_no, kind="stable")
    return Piece(columns, record_no[order], bad_no[bad_order], [bad_reason[i] for i in bad_order], raw_text or _route(pieces))


def rebatch(pieces: Iterable[Piece], size: int) -> Iterator[Piece]:
    """Batches of exactly `size` records (the last one fewer) out of pieces of any size, in order."""
    held: list[Piece] = []
    count = 0
    for piece in pieces:
        while piece is not None and piece.n_records:
            head, piece = piece.split(size - count)
            held.append(head)
            count += head.n_records
            if count == size:
                yield merge(held)
                held, count = [], 0
    if count:
        yield merge(held)


def _plain(col: pa.Array) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _is_sorted(order: np.ndarray) -> bool:
    return bool(order.size < 2 or (np.diff(order) == 1).all())


def _route(pieces: list[Piece]) -> Callable[[Iterable[int]], list[str]]:
    """raw_text over consecutive pieces: each record number is asked of the piece whose range holds it."""
    live = [p for p in pieces if p.n_records]
    starts = np.array([p.first_no for p in live], dtype=np.int64)

    def raw_text(record_nos: Iterable[int]) -> list[str]:
        nos = np.asarray([int(r) for r in record_nos], dtype=np.int64)
        out = [""] * nos.size
        owner = np.searchsorted(starts, nos, side="right") - 1
        for o in np.unique(owner):
            at = np.flatnonzero(owner == o)
            for i, text in zip(at, live[max(int(o), 0)].raw_text(nos[at].tolist())):
                out[i] = text
        return out

    return raw_text
