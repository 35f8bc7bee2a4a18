"""A demand file: CSV with a header `ts,demand_tps`, one line per sample (ts in UTC epoch seconds or ISO 8601
with a zone, demand_tps the whole demand in tokens/s). A file with a bad line is refused whole, naming the line,
so a file is either in or not."""

from __future__ import annotations

import csv
import io
import math
from datetime import datetime

import numpy as np

from fleet.ingest.demand.base import DemandRequest
from fleet.ingest.formats import BadSource
from storage.values import DemandBatch

HEADER = ("ts", "demand_tps")


def _ts(text: str) -> int | None:
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(t.timestamp()) if t.tzinfo is not None else None


class DemandCsv:
    name = "csv"
    part = "offered"
    pulled = False

    def samples(self, request: DemandRequest) -> DemandBatch:
        where = f"demand file {request.name!r}"
        try:
            text = (request.data or b"").decode("utf-8-sig")
        except UnicodeDecodeError:
            raise BadSource(f"{where}: not UTF-8 text") from None
        rows = csv.reader(io.StringIO(text))
        header = next(rows, None)
        if header is None or tuple(h.strip() for h in header) != HEADER:
            raise BadSource(f"{where}: line 1: expected the header {','.join(HEADER)}")
        ts, tps = [], []
        for line, row in enumerate(rows, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != 2:
                raise BadSource(f"{where}: line {line}: expected 2 fields (ts, demand_tps), got {len(row)}")
            t = _ts(row[0])
            if t is None:
                raise BadSource(f"{where}: line {line}: ts {row[0].strip()!r} is neither epoch seconds nor an ISO 8601 time with a zone")
            try:
                v = float(row[1])
            except ValueError:
                v = math.nan
            if not (math.isfinite(v) and v >= 0):
                raise BadSource(f"{where}: line {line}: demand_tps {row[1].strip()!r} is not a number >= 0")
            ts.append(t)
            tps.append(v)
        if not ts:
            raise BadSource(f"{where}: no samples after the header")
        return DemandBatch(self.part, np.array(ts, dtype=np.int64), np.array(tps, dtype=np.float64))

