"""Judging records and storing them: each batch judged against the known cards, then written in one transaction.

- A bad **record** is quarantined with its raw text, its record number (the line
  number in a text file, the row number in a Parquet file) and a reason from
  `REASONS`; the valid records around it are stored.
- A **crash** mid-write loses at most the batch in flight (its transaction rolls
  back); running the same ingest again stores what is missing, and the (card_id,
  ts) key makes the samples already stored duplicates. A run whose last batch did
  not commit stays without `finished_ts` in `ingest_runs`.

Counts always add up: read = stored + duplicates + quarantined. Judging is pure;
only `ingest_parsed` talks to the store, through `storage.interfaces.TelemetryStore`.

**Test hook** (for crash tests only; never set it in production): with the
environment variable `FLEET_INGEST_TEST_KILL` set to `commit:K`, the process
SIGKILLs itself inside batch K's transaction (counted from 0), just before its
COMMIT reaches the database; with `batch:K`, just after batch K committed. A
crash test can so kill an ingest at a chosen point instead of at a wall-clock time.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from fleet.core.errors import ConfigError
from fleet.ingest.fields import MISSING, NONFINITE, OK, TOO_LONG, UNPARSEABLE, _as_epoch_seconds, _as_numbers, _keys
from fleet.ingest.formats import ABSOLUTE_MAX_TPS, FUTURE_SLACK_S, MIN_TS, REASONS, _REASON_CODE, Parsed, read_file
from storage.interfaces import TelemetryStore
from storage.values import SERVING_COLUMNS, BatchOrigin, CardInfo, ClassSpec, Rejected, SampleBatch

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


@dataclass
class Judged:
    """One batch judged: the samples to store, the records rejected, the cards to register, the in-batch duplicates."""

    samples: SampleBatch
    rejected: Rejected
    register: dict[str, str]
    duplicates: int


class Reasons:
    """Each record's first fault (0: none yet; else 1 + its index in REASONS): a later check never overwrites it."""

    def __init__(self, n: int):
        self.code = np.zeros(n, dtype=np.int16)

    def flag(self, mask: np.ndarray, why: str) -> None:
        self.code[mask & (self.code == 0)] = _REASON_CODE[why]

    @property
    def clean(self) -> np.ndarray:
        return self.code == 0


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
    card and class, then plausibility against the class's rated rate, then duplicates within the batch.
    """
    n = int(record_no.size)
    reasons = Reasons(n)
    key, ts, tps, busy, named_class = _judge_fields(columns, n, reasons, settings)
    serving = judge_serving(columns, reasons)
    inv, uniq, card_class, row_known = _judge_cards(key, named_class, tps, cards, classes, settings, reasons)
    ts_int = np.floor(np.where(reasons.clean, ts, 0)).astype(np.int64)
    dup_pos, duplicates = judge_duplicates(inv, ts_int, tps, busy, reasons)
    store = reasons.clean & ~dup_pos

    register = {}
    if not settings.strict:
        for k in np.unique(inv[store & ~row_known]) if n else []:
            register[str(uniq[k])] = str(card_class[k])

    bad = np.flatnonzero(reasons.code)
    pre_no, pre_reason = list(pre_no), list(pre_reason)
    rej_no = pre_no + record_no[bad].tolist()
    rejected = Rejected(rej_no, raw_text(rej_no), pre_reason + [REASONS[c - 1] for c in reasons.code[bad].tolist()])
    samples = SampleBatch(
        card_key=key[store],
        ts=ts_int[store],
        tokens_per_s=tps[store],
        busy_fraction=busy[store],
        record_no=record_no[store],
        serving={c: v[store] for c, v in serving.items()} or None,
    )
    return Judged(samples, rejected, register, duplicates)


def judge_ts(col: pa.Array, reasons: Reasons, settings: IngestSettings) -> np.ndarray:
    """Timestamps as epoch seconds, each flagged missing, unparseable or out of the store's range: before `MIN_TS`
    or more than `FUTURE_SLACK_S` ahead of the clock (a far date is a unit or clock error: milliseconds, year 2100).
    The one rule for every record that carries a time, telemetry's and demand's."""
    ts, ts_st = _as_epoch_seconds(col)
    reasons.flag(ts_st == MISSING, "missing:ts")
    reasons.flag(ts_st == UNPARSEABLE, "unparseable:ts")
    with np.errstate(invalid="ignore"):
        reasons.flag((ts_st == OK) & ((ts < MIN_TS) | (ts > settings.max_ts)), "out-of-range:ts")
    return ts


def judge_rate(col: pa.Array, field: str, reasons: Reasons, negative_ok: bool = False) -> np.ndarray:
    """A rate in tokens/s, each flagged missing, unparseable, not finite or (unless `negative_ok`) negative, with
    the reason naming `field`."""
    v, st = _as_numbers(col)
    reasons.flag(st == MISSING, f"missing:{field}")
    reasons.flag(st == UNPARSEABLE, f"unparseable:{field}")
    reasons.flag(st == NONFINITE, f"non-finite:{field}")
    if not negative_ok:
        with np.errstate(invalid="ignore"):
            reasons.flag((st == OK) & (v < 0), f"negative:{field}")
    return v


SERVING_LIMITS = {  # column -> (the least value, whether the least itself is allowed, the most or None)
    "batch_mean": (0.0, True, None),
    "tpot_s": (0.0, False, None),
    "ttft_s": (0.0, False, None),
    "ttft_ok_share": (0.0, True, 1.0),
}


def judge_serving(columns: Mapping[str, pa.Array], reasons: Reasons) -> dict[str, np.ndarray]:
    """The serving stack's columns a source gave (`SERVING_COLUMNS`), each value flagged unparseable, not finite or
    out of its range (a batch below zero is `negative`); a missing value is none (NaN), not a fault."""
    out = {}
    for c in SERVING_COLUMNS:
        if c not in columns:
            continue
        v, st = _as_numbers(columns[c])
        reasons.flag(st == UNPARSEABLE, f"unparseable:{c}")
        reasons.flag(st == NONFINITE, f"non-finite:{c}")
        least, least_ok, most = SERVING_LIMITS[c]
        with np.errstate(invalid="ignore"):
            below = (v < least) if least_ok else (v <= least)
            beyond = (v > most) if most is not None else np.zeros(v.size, dtype=bool)
        reasons.flag((st == OK) & below, f"negative:{c}" if c == "batch_mean" else f"out-of-range:{c}")
        if most is not None:
            reasons.flag((st == OK) & beyond, f"out-of-range:{c}")
        out[c] = np.where(st == OK, v, np.nan)
    return out


def card_ceiling_tps(rated_tps: np.ndarray, plausible_factor: float) -> np.ndarray:
    """The highest rate a card is believed to serve: `plausible_factor` × its class's rated rate, or
    `ABSOLUTE_MAX_TPS` where the rate is not known (NaN)."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(rated_tps), ABSOLUTE_MAX_TPS, plausible_factor * rated_tps)


def _judge_fields(columns: Mapping[str, pa.Array], n: int, reasons: Reasons, settings: IngestSettings):
    """Each field parsed and checked on its own: (card key, ts, tokens/s, busy fraction, the class a record names)."""
    flag = reasons.flag
    key, key_st = _keys(columns["card_id"])
    flag(key_st == MISSING, "missing:card_id")
    flag(key_st == UNPARSEABLE, "unparseable:card_id")
    flag(key_st == TOO_LONG, "too-long:card_id")
    ts = judge_ts(columns["ts"], reasons, settings)
    tps = judge_rate(columns["tokens_per_s"], "tokens_per_s", reasons)
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
        flag(cls_st == TOO_LONG, "too-long:card_class")
        named_class = np.where(cls_st == OK, named_class, None)
    else:
        named_class = np.full(n, None, dtype=object)
    return key, ts, tps, busy, named_class


def _judge_cards(key, named_class, tps, cards: Mapping[str, CardInfo], classes: Mapping[str, ClassSpec],
                 settings: IngestSettings, reasons: Reasons):
    """Cards: known ones keep their class; unknown ones are registered (or, strict, quarantined); then the class a
    record names against its card's, and the rate against its class's rated one. Returns (each record's card
    index, the cards, each card's class, whether each record's card was known)."""
    n = key.size
    alive = reasons.clean
    inv, uniq = pd.factorize(pd.Series(key, dtype=object))
    uniq = np.asarray(uniq, dtype=object)
    known = np.array([k in cards for k in uniq], dtype=bool)
    card_class = np.array([cards[k].class_name if k in cards else None for k in uniq], dtype=object)
    row_known = known[inv] if n else np.zeros(0, dtype=bool)
    if settings.strict:
        reasons.flag(alive & ~row_known, "unknown-card")
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
    reasons.flag((named_class != None) & (row_class != None) & (named_class != row_class), "class-conflict")  # noqa: E711
    rated = np.array([classes[c].rated_tps if c in classes and classes[c].rated_tps else np.nan for c in card_class], dtype=float)
    row_rated = rated[inv] if n else np.zeros(0)
    with np.errstate(invalid="ignore"):
        reasons.flag(tps > card_ceiling_tps(row_rated, settings.plausible_factor), "implausible:tokens_per_s")
    return inv, uniq, card_class, row_known


def judge_duplicates(inv, ts_int, tps, busy, reasons: Reasons) -> tuple[np.ndarray, int]:
    """Within the batch, a record repeating an earlier one's card and second is a duplicate (same values: dropped,
    counted) or a conflict (quarantined). Returns (the duplicates' positions, how many)."""
    n = inv.size
    valid = reasons.clean
    frame = pd.DataFrame({"k": inv, "ts": ts_int, "tps": tps, "busy": busy})[valid]
    dup = frame.duplicated(subset=["k", "ts"], keep="first")
    dup_pos = np.zeros(n, dtype=bool)
    if not dup.any():
        return dup_pos, 0
    firsts = frame.groupby(["k", "ts"], sort=False)[["tps", "busy"]].transform("first")
    same = (frame["tps"] == firsts["tps"]) & ((frame["busy"] == firsts["busy"]) | (frame["busy"].isna() & firsts["busy"].isna()))
    conflict_pos = frame.index.to_numpy()[(dup & ~same).to_numpy()]
    same_pos = frame.index.to_numpy()[(dup & same).to_numpy()]
    reasons.code[conflict_pos] = _REASON_CODE["conflicting-duplicate"]
    dup_pos[same_pos] = True
    return dup_pos, int(same_pos.size)


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
    replaced: list = field(default_factory=list)  # demand samples a `replace` ingest wrote over (`storage.demand.DemandConflict`)

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
            **({"replaced": len(self.replaced)} if self.replaced else {}),
        }


def ingest_parsed(
    repo: TelemetryStore,
    parsed: Parsed,
    settings: IngestSettings,
    progress: Callable[[int], None] | None = None,
) -> IngestReport:
    """Judge and store a source, one transaction per batch of `settings.batch_records` records, reading it one
    batch at a time (memory holds a batch, never the source)."""
    report = IngestReport(parsed.name)
    batches = parsed.batches(settings.batch_records)
    run_id = repo.begin_run(parsed.name, parsed.digest, settings.now_ts)
    report.run_id = run_id
    cards = dict(repo.cards())
    classes = dict(repo.classes())
    hook = _KillHook.from_env(repo)
    try:
        for part, batch in enumerate(batches):
            judged = judge(batch.columns, batch.record_no, batch.raw_text, cards, classes, settings, batch.bad_no.tolist(), batch.bad_reason)
            hook.before_write(part)
            out = repo.write_batch(
                BatchOrigin(run_id, part, batch.first_no, parsed.name, parsed.digest), judged.samples, judged.rejected,
                judged.register, settings.now_ts, raw_text_of=batch.raw_text, duplicates_in_batch=judged.duplicates,
            )
            hook.after_write(part)
            for info in out.registered:
                cards[info.card_key] = info
            if out.registered:
                classes = dict(repo.classes())
            report.add(out.read, out.stored, out.duplicates, out.quarantined, out.reasons)
            if progress:
                progress(batch.n_records)
    finally:
        hook.close()
    repo.finish_run(run_id, settings.now_ts)
    return report


def ingest_file(repo: TelemetryStore, path: str | Path, settings: IngestSettings, fmt: str | None = None,
                progress: Callable[[int], None] | None = None) -> IngestReport:
    """Open and check a file (a bad file raises `BadSource` before anything is written), then store it batch by batch."""
    return ingest_parsed(repo, read_file(path, fmt), settings, progress)


TEST_KILL_ENV = "FLEET_INGEST_TEST_KILL"


class _KillHook:
    """The crash tests' hook (see the module's docstring): SIGKILL this process at a chosen batch's commit."""

    def __init__(self, where: str | None = None, part: int = -1, repo: TelemetryStore | None = None):
        self.where, self.part, self.armed = where, part, False
        self._undo: Callable[[], None] | None = None
        if where == "commit":
            from storage.open import each_commit

            self._undo = each_commit(repo, self._on_commit)  # fires before the COMMIT is sent

    @classmethod
    def from_env(cls, repo: TelemetryStore) -> _KillHook:
        spec = os.environ.get(TEST_KILL_ENV)
        if not spec:
            return cls()
        where, _, k = spec.partition(":")
        if where not in ("commit", "batch") or not k.isdigit():
            raise ConfigError(f"{TEST_KILL_ENV}={spec!r}: expected commit:K or batch:K (a test hook)")
        return cls(where, int(k), repo)

    def _on_commit(self) -> None:
        if self.armed:
            os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None

    def before_write(self, part: int) -> None:
        self.armed = self.where == "commit" and part == self.part

    def after_write(self, part: int) -> None:
        self.armed = False
        if self.where == "batch" and part == self.part:
            os.kill(os.getpid(), signal.SIGKILL)
