"""What the pool is known to run, beside what the journal decided.

The journal's run set is what was decided; the pool runs what was acted. Three
things part them, and each is read here, once, for the decide job, `fleet
status` and the metrics:

- an action set aside or expired (`acting.py`) never happened: a card whose last
  action did not stand runs as its last action that stood left it (carried out, or
  still to be), or as it ran before its first action of the month when none did
  (`pool_runs`; the store finds the cards: `ReconcileStore.last_actions_not_carried_out`).
  So an expired add and the release after it, both never carried out, leave a card
  that never ran: it is not counted running, and not released again;
- a card an operator retired by hand (`fleet card retire`) is gone for good;
- the telemetry: a warm card silent for `[reconcile] silent_after_s` is not
  serving, and a card released or evicted that still serves tokens was not
  stopped (a mismatch the operator must look at: the service cannot stop it).

A silent warm card is not counted as capacity and may not be chosen while it is
silent, so the next hour's sizing adds a replacement. Mismatches are journaled
when first seen and when they clear (`reconcile` records), one record per change.
"""

from __future__ import annotations

import getpass
from datetime import datetime, timezone
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, AbstractSet, Callable, Mapping, Sequence

from storage.values import JournalEntry, Kind
from storage.records import ReconcileRecord

if TYPE_CHECKING:
    from storage.interfaces import JournalStore, ReconcileStore
    from storage.values import JournalRow

SILENT, STILL_SERVING = "silent", "still-serving"
MISMATCH_KINDS = (SILENT, STILL_SERVING)
"""The labels of `fleet_reconcile_mismatches{kind}`, known up front so the series exist from the first scrape."""

RECONCILE_KIND = Kind.RECONCILE
RETIRE_KIND = Kind.RETIRE


@dataclass(frozen=True)
class KnownRunSet:
    """The run set the pool is known to run at an hour's start, and why it differs from the journal's."""

    cards: frozenset[str]
    left_out: Mapping[str, str] = field(default_factory=dict)  # journal has it warm; not counted (card -> why)
    put_back: Mapping[str, str] = field(default_factory=dict)  # journal released it; still runs (card -> why)
    ineligible: frozenset[str] = frozenset()  # may not be chosen this hour: retired by hand, or silent
    silent: frozenset[str] = frozenset()  # left out as silent: released with that said, the pool may still hold them
    retired: frozenset[str] = frozenset()  # retired by hand: out of the pool for good


Records = Callable[[Sequence[str], "int | None"], "list[JournalRow]"]
"""Journal rows of some kinds at or after a time, oldest first (`ReconcileStore.records_of_kinds`)."""



def _when(ts: float) -> str:
    """A time in a journaled reason, as a time (`2026-01-01T06:00:00Z`), never as epoch seconds that read as a count."""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

def _records(store: JournalStore, records: Records | None) -> Records:
    return records or (lambda kinds, since: store.decisions(kinds=kinds, since_ts=since, limit=1_000_000))


def retired_by_hand(store: JournalStore, records: Records | None = None) -> dict[str, JournalRow]:
    """Card -> its `retire` record, for every card an operator retired."""
    return {r.card_key: r for r in _records(store, records)([RETIRE_KIND], None) if r.card_key}


def pool_runs(actions: Sequence[tuple[JournalRow, bool]]) -> bool:
    """Whether the pool runs a card after its run-set actions (oldest first, each with whether it stands): as the
    last that stands left it, and where none stands, as before the first (an add is decided for a card not running,
    a release or an eviction for one running)."""
    stood = [row for row, stands in actions if stands]
    if stood:
        return stood[-1].kind == Kind.ADD
    return bool(actions) and actions[0][0].kind != Kind.ADD


def known_run_set(journal_open: AbstractSet[str], not_carried: Mapping[str, tuple[JournalRow, bool]],
                  retired: Mapping[str, JournalRow], silent: Mapping[str, str], evicted: AbstractSet[str] = frozenset()
                  ) -> KnownRunSet:
    """From the journal's run set to the one the pool is known to run. `not_carried`: card -> (its last action,
    which did not stand; whether the pool runs it all the same, `pool_runs`): one it does not run out, one it runs
    back (an evicted card stays out: it has left the pool for the month); retired and silent cards out."""
    cards = set(journal_open)
    left_out: dict[str, str] = {}
    put_back: dict[str, str] = {}
    for card, (row, runs) in not_carried.items():
        if not runs and card in cards:
            cards.discard(card)
            left_out[card] = f"its {row.kind} ({row.key}) was not carried out: the pool is not known to run it"
        elif runs and card not in cards and card not in retired and card not in evicted:
            cards.add(card)
            put_back[card] = f"its {row.kind} ({row.key}) was not carried out: the pool still runs it"
    for card, row in retired.items():
        if card in cards:
            cards.discard(card)
            left_out[card] = f"retired by hand ({row.reason})"
    gone = set()
    for card, why in silent.items():
        if card in cards:
            cards.discard(card)
            left_out[card] = why
            gone.add(card)
    return KnownRunSet(frozenset(cards), left_out, put_back, frozenset(retired) | frozenset(silent), frozenset(gone),
                       frozenset(retired))


@dataclass(frozen=True)
class Mismatch:
    card: str
    kind: str  # SILENT or STILL_SERVING
    since_ts: int  # when it began: the last telemetry (silent), or the first after the card stopped (still serving)
    reason: str


def _feed_ts(last_seen: Mapping[str, int | None], now_ts: int) -> int | None:
    """The feed's newest telemetry (any card's), not past the clock; None when no card was ever heard."""
    heard = [t for t in last_seen.values() if t is not None]
    return min(now_ts, max(heard)) if heard else None


def silent_candidates(warm: AbstractSet[str], last_seen: Mapping[str, int | None], now_ts: int,
                      silent_after_s: float) -> set[str]:
    """The warm cards that may be silent: not heard within `silent_after_s` of the feed's newest telemetry. A card
    is silent when it is not heard since the later of its last telemetry and its warming, so no card outside these
    is; the exact test runs on them alone (usually none, where the pool has tens of thousands warm)."""
    return _stale(warm, last_seen, _feed_ts(last_seen, now_ts), silent_after_s)


def _stale(warm: AbstractSet[str], last_seen: Mapping[str, int | None], feed_ts: int | None,
           silent_after_s: float) -> set[str]:
    """`silent_candidates` against a known feed time. The feed's cards are read in their own order and the warm
    ones picked out by set operations: a loop over the warm set would read the feed's cards out of order."""
    if feed_ts is None or not warm:
        return set()
    warm = warm if isinstance(warm, (set, frozenset)) else set(warm)
    stale = {card for card, t in last_seen.items() if t is None or feed_ts - t > silent_after_s}
    return stale.intersection(warm) | warm.difference(last_seen)  # the latter: warm, and not in the feed at all


def find_mismatches(warm: AbstractSet[str], stopped: Mapping[str, int], last_seen: Mapping[str, int | None],
                    warm_since: Mapping[str, int], last_serving: Mapping[str, int | None], now_ts: int,
                    silent_after_s: float) -> list[Mismatch]:
    """The pure check. `warm`: cards the journal has warm (since `warm_since`); `stopped`: card -> when its release
    or eviction took effect; `last_seen` (every card's, warm or not) / `last_serving`: each card's last telemetry,
    and last with tokens served.

    Silence is counted to the feed's newest telemetry (any card's), not to the clock: when the whole feed stops
    (an exporter or a pipeline down), no card is heard from and none is taken for silent, for that says nothing of
    the cards; a card is silent when the others are heard and it is not."""
    out = []
    feed_ts = _feed_ts(last_seen, now_ts)
    for card in sorted(_stale(warm, last_seen, feed_ts, silent_after_s)):  # the exact test, on the candidates
        seen = last_seen.get(card)
        since = max(seen or 0, warm_since.get(card, 0))
        if feed_ts is not None and feed_ts - since > silent_after_s:
            said = "never sent telemetry" if seen is None else f"no telemetry since {_when(seen)}"
            out.append(Mismatch(card, SILENT, since, f"warm in the journal, {said} (over {silent_after_s:g} s)"))
    for card, ts in sorted(stopped.items()):
        served = last_serving.get(card)
        if card not in warm and served is not None and served >= ts:
            out.append(Mismatch(card, STILL_SERVING, ts, f"released or evicted at {_when(ts)}, still served tokens at {_when(served)}"))
    return out


def mismatch_entries(now_ts: int, found: list[Mismatch], open_before: Mapping[tuple[str, str], JournalRow]) -> list[JournalEntry]:
    """`reconcile` records for what changed: a mismatch open before and no longer found (cleared), then one first
    seen."""
    entries = []
    now_keys = {(m.card, m.kind) for m in found}
    for (card, kind), row in sorted(open_before.items()):
        if (card, kind) not in now_keys:
            entries.append(JournalEntry(f"reconcile:{card}:{kind}:{now_ts}:cleared", now_ts, RECONCILE_KIND,
                                        f"{kind} cleared", card,
                                        detail=ReconcileRecord(mismatch=kind, state="cleared", seen_key=row.key).to_detail(), acted=True))
    for m in found:
        if (m.card, m.kind) not in open_before:
            entries.append(JournalEntry(f"reconcile:{m.card}:{m.kind}:{now_ts}", now_ts, RECONCILE_KIND,
                                        f"{m.kind}: {m.reason}", m.card,
                                        detail=ReconcileRecord(mismatch=m.kind, state="seen", since_ts=m.since_ts).to_detail(),
                                        acted=True))
    return entries


def open_mismatches(store: JournalStore) -> dict[tuple[str, str], JournalRow]:
    """(card, kind) -> the `reconcile` record of each mismatch seen and not cleared since: the rows the store keeps
    open as it journals them (`JournalStore.reconcile_open`), so a read of the few open, not of every record."""
    return fold_mismatches(store.reconcile_open())


def fold_mismatches(rows) -> dict[tuple[str, str], JournalRow]:
    """The open mismatches of `reconcile` records in the order written: a `seen` record opens its (card, kind), a
    `cleared` one closes it (the rule the store's `reconcile_open` keeps as it writes them)."""
    out: dict[tuple[str, str], JournalRow] = {}
    for r in rows:  # oldest first: a later record of the same mismatch replaces an earlier one
        key = (r.card_key, r.record.mismatch)
        if r.record.seen:
            out[key] = r
        else:
            out.pop(key, None)
    return out


def operator() -> str:
    """Who is retiring a card: the OS user running the command."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in the environment nor the password database
        return "unknown"



STOPPED_LOOKBACK_S = 40 * 86400
"""How far back a release or eviction is looked for when asking whether a stopped card still serves."""


class Reconciler:
    """What the pool is known to run, and the check against its telemetry, on the service's clock. The check is a
    real pool's only (`enabled`): a simulation's feed reports every card's rate whether it is warm or not, so it
    says nothing of what the pool runs."""

    def __init__(self, store: JournalStore, cards: ReconcileStore, clock, silent_after_s: float, enabled: bool = True):
        self.store, self.cards, self.clock = store, cards, clock
        self.silent_after_s = float(silent_after_s)
        self.enabled = enabled
        self._heard: dict[str, int | None] | None = None  # every card's last telemetry, as the last `run` read it

    def _last_heard(self) -> dict[str, int | None]:
        """Every card's last telemetry as this decide run's check read it (one read of every card a run: at
        100,000 cards it is a second's work), or read now before any run."""
        return self._heard if self._heard is not None else self.cards.last_heard()

    def known_run_set(self, hour_ts: int, month_start_ts: int, journal_open: AbstractSet[str],
                      evicted: AbstractSet[str] = frozenset()) -> KnownRunSet:
        """The run set the pool is known to run at `hour_ts`: the journal's (`journal_open`), less adds not carried
        out, cards retired by hand and silent ones, plus releases not carried out (of cards not `evicted` this
        month). Actions not carried out and retirements count in a simulation too; silence only beside a real pool."""
        return known_run_set(journal_open, self.not_carried(month_start_ts, hour_ts),
                             retired_by_hand(self.store, self.cards.records_of_kinds), self.silent(hour_ts, journal_open), evicted)

    def not_carried(self, month_start_ts: int, hour_ts: int) -> dict[str, tuple[JournalRow, bool]]:
        """Card -> (its last action of the month before `hour_ts`, which did not stand; whether the pool runs it
        all the same), for the few cards whose last action was set aside or expired."""
        last = self.cards.last_actions_not_carried_out(month_start_ts, hour_ts)
        if not last:
            return {}
        actions = self.cards.run_set_actions(last, month_start_ts, hour_ts)
        return {card: (row, pool_runs(actions.get(card) or [(row, False)])) for card, row in last.items()}

    def silent(self, hour_ts: int, warm: AbstractSet[str]) -> dict[str, str]:
        """Warm cards (of `warm`) silent at `hour_ts` -> why: what the decide job leaves out of the hour's capacity."""
        if not self.enabled or not warm:
            return {}
        heard = self._last_heard()
        if not silent_candidates(warm, heard, hour_ts, self.silent_after_s):
            return {}  # none can be silent: when each warmed need not be read (every open run-set interval)
        since = self.cards.warm_since(hour_ts - 1)
        found = find_mismatches(set(warm), {}, heard, since, {}, hour_ts, self.silent_after_s)
        return {m.card: f"not serving: {m.reason}" for m in found if m.kind == SILENT}

    def run(self) -> int:
        """Flag what disagrees now and clear what agrees again, one `reconcile` record per change; returns the
        records written."""
        if not self.enabled:
            return 0
        now = int(self.clock.now())
        since = self.cards.warm_since(now)
        warm = set(since)
        # Serving now: a sample with tokens within the last silent_after_s, after the card was stopped.
        stopped = self.cards.still_serving(now - STOPPED_LOOKBACK_S, now - int(self.silent_after_s), warm)
        # Every card's last telemetry: the feed's newest is the silence's measure. The hours this run decides read
        # the same (`silent`): what was heard when the run began.
        self._heard = heard = self.cards.last_heard()
        found = find_mismatches(warm, {k: v[0] for k, v in stopped.items()}, heard, since,
                                {k: v[1] for k, v in stopped.items()}, now, self.silent_after_s)
        return self.cards.journal_records(mismatch_entries(now, found, open_mismatches(self.store)))
