"""Judging demand records and storing them, as `fleet.ingest.store` judges and stores telemetry: every demand
input (a demand file, a dropped one, `fleet ingest --demand`, a pulled source) passes here.

A record is quarantined with its number (a file's line) and the first reason it fails:

- its time: missing, unparseable, or out of the store's range (`fleet.ingest.store.judge_ts`, telemetry's rule:
  before 2000, or more than a day ahead of the clock: epoch milliseconds, year 2100, 1970, a negative time);
- its value: missing, unparseable, not finite, negative (`offered` demand; the `unserved` part may be negative: a
  queue that drains), or beyond the pool's **demand ceiling** (`implausible:demand_tps`): the sum over the store's
  cards of the rate each may plausibly serve (`plausible_factor`, 5 unless told, × its class's rated rate, or
  10,000,000 tok/s for a card whose class has none); 10,000,000 tok/s in a store with no cards yet;
- a second given twice in the source: the same value again is a duplicate, another value `conflicting-duplicate`
  (the first stands);
- a second stored already with another value: `conflicting-duplicate` (the stored value stands), unless the
  ingest was asked to `replace` (`fleet ingest --demand FILE --replace`), which writes the new value over the stored
  one and journals each change (`storage.demand`).

Counts add up as telemetry's do: read = stored + duplicates + quarantined. Judging is pure; only `ingest_demand`
talks to the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

import numpy as np
import pyarrow as pa

from fleet.ingest.formats import ABSOLUTE_MAX_TPS, REASONS, Parsed
from fleet.ingest.store import IngestReport, IngestSettings, Reasons, card_ceiling_tps, judge_duplicates, judge_rate, judge_ts
from storage.values import BatchOrigin, CardInfo, DemandBatch, Rejected


def demand_ceiling_tps(cards: Mapping[str, CardInfo], plausible_factor: float) -> float:
    """The most demand a pool is believed to see: its cards' plausible rates summed (telemetry's per-card ceiling);
    with no card known yet, one card of unknown rate's (`ABSOLUTE_MAX_TPS`)."""
    if not cards:
        return float(ABSOLUTE_MAX_TPS)
    rated = np.array([np.nan if c.rated_tps is None else float(c.rated_tps) for c in cards.values()], dtype=float)
    return float(card_ceiling_tps(rated, plausible_factor).sum())


@dataclass
class JudgedDemand:
    """One batch judged: the samples to store, the records rejected, the in-batch duplicates."""

    samples: DemandBatch
    rejected: Rejected
    duplicates: int


def judge_demand(columns: Mapping[str, pa.Array], record_no: np.ndarray, raw_text: Callable[[Iterable[int]], list[str]],
                 part: str, settings: IngestSettings, ceiling_tps: float, pre_no: Iterable[int] = (),
                 pre_reason: Iterable[str] = ()) -> JudgedDemand:
    """Judge one batch of demand records (columns `ts`, `demand_tps`); `pre_no`/`pre_reason` are records the reader
    already found malformed."""
    n = int(record_no.size)
    reasons = Reasons(n)
    ts = judge_ts(columns["ts"], reasons, settings)
    tps = judge_rate(columns["demand_tps"], "demand_tps", reasons, negative_ok=part == "unserved")
    with np.errstate(invalid="ignore"):
        reasons.flag(np.abs(tps) > ceiling_tps, "implausible:demand_tps")
    ts_int = np.floor(np.where(reasons.clean, ts, 0)).astype(np.int64)
    dup_pos, duplicates = judge_duplicates(np.zeros(n, dtype=np.int64), ts_int, tps, np.full(n, np.nan), reasons)
    keep = reasons.clean & ~dup_pos
    bad = np.flatnonzero(reasons.code)
    rej_no = list(pre_no) + record_no[bad].tolist()
    rejected = Rejected(rej_no, raw_text(rej_no), list(pre_reason) + [REASONS[c - 1] for c in reasons.code[bad].tolist()])
    return JudgedDemand(DemandBatch(part, ts_int[keep], tps[keep], record_no[keep]), rejected, duplicates)


def ingest_demand(repo, parsed: Parsed, settings: IngestSettings, part: str, replace: bool = False) -> IngestReport:
    """Judge and store a demand source batch by batch, one transaction each, as `ingest_parsed` does telemetry's;
    the report's `replaced` lists the stored samples a `replace` ingest wrote over."""
    report = IngestReport(parsed.name)
    run_id = repo.begin_run(parsed.name, parsed.digest, settings.now_ts)
    report.run_id = run_id
    ceiling = demand_ceiling_tps(repo.cards(), settings.plausible_factor)
    for k, batch in enumerate(parsed.batches(settings.batch_records)):
        judged = judge_demand(batch.columns, batch.record_no, batch.raw_text, part, settings, ceiling,
                              batch.bad_no.tolist(), batch.bad_reason)
        out = repo.write_demand_batch(BatchOrigin(run_id, k, batch.first_no, parsed.name, parsed.digest), judged.samples,
                                      judged.rejected, settings.now_ts, batch.raw_text, judged.duplicates, replace)
        report.add(out.read, out.stored, out.duplicates, out.quarantined, out.reasons)
        report.replaced.extend(out.replaced)
    repo.finish_run(run_id, settings.now_ts)
    return report
