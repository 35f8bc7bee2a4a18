"""The journal against the pool: a warm card gone silent and a released card still serving are flagged (journal,
status, gauge), once each, and a silent card is not counted when the next hour is sized."""

from __future__ import annotations

import json
import os

import pytest

from fleet.service.calendar import HOUR_S
from fleet.service.reconcile import SILENT, STILL_SERVING, Mismatch, _when, find_mismatches, mismatch_entries, silent_candidates
from storage.repository import open_repository
from storage.values import JournalRow
from tests.fake_prometheus import StepClock
from tests.service.real_pool import FLAGSHIP_DAY, T0
from tests.service.test_service import run_cli
SILENT_AFTER_S = 3600


@pytest.mark.parametrize(
    "case, warm, stopped, seen, since, serving, now, want",
    [
        ("heard within the time: agrees", {"a"}, {}, {"a": 900, "b": 1000}, {"a": 0}, {}, 1000, []),
        ("silent past the time while the feed hears another", {"a"}, {}, {"a": 100, "b": 5000}, {"a": 0}, {}, 5000,
         [("a", SILENT)]),
        ("the whole feed silent: no card is taken for silent", {"a", "b"}, {}, {"a": 100, "b": 100}, {"a": 0, "b": 0}, {},
         9000, []),
        ("just warmed, never heard yet: counted from when it warmed", {"a"}, {}, {"a": None, "b": 5000}, {"a": 4000}, {},
         5000, []),
        ("never heard, warm long ago", {"a"}, {}, {"a": None, "b": 5000}, {"a": 0}, {}, 5000, [("a", SILENT)]),
        ("released and serving after: still serving", set(), {"c": 1000}, {"c": 2000}, {}, {"c": 2000}, 2000,
         [("c", STILL_SERVING)]),
        ("released, nothing served after: agrees", set(), {"c": 1000}, {"c": 2000}, {}, {}, 2000, []),
        ("warm again: not a stopped card", {"c"}, {"c": 1000}, {"c": 2000}, {"c": 1500}, {"c": 2000}, 2000, []),
    ],
)
def test_find_mismatches(case, warm, stopped, seen, since, serving, now, want):
    got = find_mismatches(warm, stopped, seen, since, serving, now, SILENT_AFTER_S)
    assert [(m.card, m.kind) for m in got] == want, case


def test_a_mismatch_is_one_record_when_seen_and_one_when_cleared():
    (m,) = find_mismatches({"a"}, {}, {"a": 0, "b": 9000}, {"a": 0}, {}, 9000, SILENT_AFTER_S)
    (seen,) = mismatch_entries(9000, [m], {})
    assert seen.kind == "reconcile" and seen.detail["state"] == "seen" and seen.card_key == "a"
    row = JournalRow(1, seen.key, seen.ts, seen.kind, "a", seen.reason, dict(seen.detail), seen.ts)
    assert mismatch_entries(9060, [m], {("a", SILENT): row}) == []  # still silent: nothing more
    (cleared,) = mismatch_entries(9120, [], {("a", SILENT): row})
    assert cleared.detail == {"mismatch": SILENT, "state": "cleared", "seen_key": seen.key}


def test_a_mismatch_says_its_times_as_times_not_as_epoch_seconds():
    """`fleet journal` groups bare numbers by thousands: an epoch second in a reason read "since 1,796,321,398"."""
    (silent,) = find_mismatches({"a"}, {}, {"a": T0, "b": T0 + 7200}, {"a": 0}, {}, T0 + 7200, SILENT_AFTER_S)
    assert silent.reason == f"warm in the journal, no telemetry since 2026-01-01T00:00:00Z (over {SILENT_AFTER_S:g} s)"
    (serving,) = find_mismatches(set(), {"a": T0}, {"a": T0 + 60}, {}, {"a": T0 + 60}, T0 + 120, SILENT_AFTER_S)
    assert serving.reason == "released or evicted at 2026-01-01T00:00:00Z, still served tokens at 2026-01-01T00:01:00Z"


def _mismatches_card_by_card(warm, stopped, last_seen, warm_since, last_serving, now_ts, silent_after_s):
    """The check as written before it picked its candidates: every warm card tested in turn."""
    out = []
    heard = [t for t in last_seen.values() if t is not None]
    feed_ts = min(now_ts, max(heard)) if heard else None
    for card in sorted(warm):
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


@pytest.mark.parametrize("seed", range(12))
def test_the_candidates_found_are_every_card_the_full_check_finds(seed):
    """Cards heard at any time, never heard, warm long ago or just now (after their last telemetry), warm and not in
    the feed at all, stopped and serving: the same mismatches, in the same order, as testing every warm card."""
    import random

    rng = random.Random(seed)
    now, after = 100_000, float(rng.choice([600, 3600, 7200, 1800.5]))
    cards = [f"gpu-{i:03d}" for i in range(300)]
    last_seen = {c: rng.choice([None, rng.randrange(now - 3 * int(after), now + 50)]) for c in cards[:280]}
    warm = set(rng.sample(cards, 200))  # some of cards[280:] are warm and not in the feed at all
    warm_since = {c: rng.randrange(now - 4 * int(after), now) for c in warm if rng.random() < 0.9}
    stopped = {c: rng.randrange(now - 2 * int(after), now) for c in rng.sample(cards, 60)}
    serving = {c: rng.choice([None, rng.randrange(now - 2 * int(after), now)]) for c in stopped}
    for now_ts in (now, now - int(after)):  # the clock before the feed's newest, too
        args = (warm, stopped, last_seen, warm_since, serving, now_ts, after)
        want = _mismatches_card_by_card(*args)
        assert find_mismatches(*args) == want
        assert sum(m.kind == SILENT for m in want) >= 3, "a case with silent cards"


def test_a_card_warmed_recently_that_never_sent_telemetry_is_a_candidate_not_silent():
    seen = {"old": 9000, "new": None, "gone": None, "fresh": 8990, "just in": 5400, "just out": 5399}
    since = {"old": 0, "new": 8000, "gone": 0, "fresh": 0, "unknown": 8500, "just in": 0, "just out": 0}
    warm = set(since)  # "unknown": warm, registered after the feed was read
    assert silent_candidates(warm, seen, 9000, SILENT_AFTER_S) == {"new", "gone", "unknown", "just out"}
    got = find_mismatches(warm, {}, seen, since, {}, 9000, SILENT_AFTER_S)
    assert [(m.card, m.since_ts) for m in got] == [("gone", 0), ("just out", 5399)]
    assert silent_candidates(warm, {"a": None}, 9000, SILENT_AFTER_S) == set()  # nothing heard: nobody is silent


class _Cards:
    """The reconcile store's reads the silent check makes, counted."""

    def __init__(self, heard, since):
        self.heard, self.since, self.warm_since_reads = heard, since, []

    def last_heard(self):
        return self.heard

    def warm_since(self, ts):
        self.warm_since_reads.append(ts)
        return self.since


def test_the_silent_check_reads_when_each_card_warmed_only_when_one_may_be_silent():
    from fleet.service.reconcile import Reconciler

    heard = {"a": 9000, "b": 8000, "c": None}
    cards = _Cards(heard, {"a": 100, "b": 100, "c": 7000})
    check = Reconciler(None, cards, None, SILENT_AFTER_S)
    assert check.silent(9000, {"a", "b"}) == {} and cards.warm_since_reads == []  # both heard within the time
    assert check.silent(9000, {"a", "c"}) == {} and cards.warm_since_reads == [8999]  # c: never heard, warm recently
    cards.since = {"a": 100, "b": 100, "c": 100}
    got = check.silent(9000, {"a", "b", "c"})
    assert list(got) == ["c"] and "never sent telemetry" in got["c"] and cards.warm_since_reads == [8999, 8999]


CONFIG = FLAGSHIP_DAY + """\
[schedule]
settle_s = 300
[reconcile]
silent_after_s = {silent}
[ingest]
default_class = "flagship"
[ingest.sources.drop-folder]
folder = "{drop}"
"""

RATES = {"gpu-a": 6000.0, "gpu-b": 5000.0, "gpu-c": 3000.0, "gpu-d": 5500.0}


def _drop_hour(drop, h: int, cards) -> None:
    """Hour h's telemetry (three samples a card) and demand, written before the clock reads it (settled)."""
    rows = ["card_id,ts,tokens_per_s"] + [f"{c},{T0 + h * HOUR_S + 60 * m},{RATES[c] * (1 + 0.01 * m)}"
                                          for m in range(3) for c in cards]
    (drop / f"hour{h + 10}.csv").write_text("\n".join(rows) + "\n")
    demand = ["ts,demand_tps"] + [f"{T0 + h * HOUR_S + 60 * m},10000" for m in range(3)]
    (drop / f"hour{h + 10}.demand.csv").write_text("\n".join(demand) + "\n")
    for p in drop.glob(f"hour{h + 10}*"):
        os.utime(p, (T0 + h * HOUR_S, T0 + h * HOUR_S))


@pytest.fixture
def pool(tmp_path):
    """A real pool on a clock the test steps a minute (one tick) at a time; its files dropped as its hours pass."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service

    drop = tmp_path / "drop"
    drop.mkdir()
    (tmp_path / "fleet.toml").write_text(CONFIG.format(silent=SILENT_AFTER_S, drop=drop))
    clock = StepClock(T0)
    db = f"sqlite:///{tmp_path / 'p.db'}"
    svc = Service(load_service_config(tmp_path / "fleet.toml"), open_repository(db), clock)
    return svc, clock, drop, db


def _tick(svc) -> None:
    for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
        job()


def test_a_silent_warm_card_and_a_released_card_still_serving_are_flagged(pool, capsys):
    svc, clock, drop, db = pool
    for h in range(-3, 0):
        _drop_hour(drop, h, RATES)
    # gpu-a, the best card, warm from hour 0, sends nothing in hours 2 and 3, then serves again from hour 4 though
    # released by then; every other card keeps sending, warm or not. A tick once its hour's file is in.
    last_a = T0 + 1 * HOUR_S + 120
    ticks = []
    for h in range(0, 5):
        _drop_hour(drop, h, [c for c in RATES if c != "gpu-a" or h <= 1 or h >= 4])
        clock.t = T0 + h * HOUR_S + 400
        ticks.append(int(clock.t))
        _tick(svc)
    assert svc.journal_store.run_set_at(T0 + HOUR_S) == {"gpu-a", "gpu-d"}  # the best tokens per dollar
    sizes = {r.ts: r.detail for r in svc.journal_store.decisions(kinds=["size"])}

    # Flagged at the first tick at which the feed's newest telemetry is more than silent_after_s past gpu-a's last:
    # hour 3's (at 02:00 the gap is exactly silent_after_s).
    records = svc.journal_store.decisions(kinds=["reconcile"])
    seen = {(r.card_key, r.detail["mismatch"]): r for r in records if r.detail["state"] == "seen"}
    first = min(t for t in ticks if (t // HOUR_S * HOUR_S + 120) - last_a > SILENT_AFTER_S)
    assert seen[("gpu-a", SILENT)].ts == first == T0 + 3 * HOUR_S + 400
    # The hour decided then leaves it out of the capacity, releases it with that said, and sizes a replacement.
    assert "gpu-a" not in sizes[T0 + 2 * HOUR_S].get("not_counted", {})
    assert "no telemetry since" in sizes[T0 + 3 * HOUR_S]["not_counted"]["gpu-a"]
    after = svc.journal_store.run_set_at(T0 + 3 * HOUR_S)
    assert "gpu-a" not in after and "gpu-d" in after and len(after) == 2
    (rel_a,) = svc.journal_store.decisions(kinds=["release"], card_key="gpu-a")
    assert rel_a.ts == T0 + 3 * HOUR_S and "not serving" in rel_a.reason and rel_a.acted_ts is not None
    # Released, gpu-a is no longer warm in the journal (silent cleared); serving again after its release took
    # effect, it is flagged as still serving at the first tick that hears it.
    assert seen[("gpu-a", STILL_SERVING)].ts == T0 + 4 * HOUR_S + 400
    states = [(r.detail["mismatch"], r.detail["state"]) for r in records if r.card_key == "gpu-a"]
    assert states == [(SILENT, "seen"), (SILENT, "cleared"), (STILL_SERVING, "seen")]  # one record per change
    n = len(records)
    clock.t += 60
    _tick(svc)  # nothing changed (gpu-a's 2-hour score is still empty: it is not added back): nothing more journaled
    assert len(svc.journal_store.decisions(kinds=["reconcile"])) == n

    snap = svc.metrics_job()
    assert snap.reconcile_mismatches == {SILENT: 0, STILL_SERVING: 1}
    code, out, err = run_cli(capsys, "status", "--db", db, "--json")
    assert code == 0, err
    assert [(m["card"], m["kind"]) for m in json.loads(out)["reconcile"]] == [("gpu-a", STILL_SERVING)]
    code, out, err = run_cli(capsys, "status", "--db", db)
    assert "journal and pool disagree (1)" in out and "gpu-a: still-serving" in out
    code, out, err = run_cli(capsys, "journal", "--db", db, "--kind", "reconcile", "--json")
    assert code == 0 and [e["reason"].split(":")[0] for e in json.loads(out)] == ["still-serving", "silent cleared", "silent"]


def test_a_silent_card_that_is_heard_again_is_cleared(pool):
    svc, clock, drop, db = pool
    from fleet.service.reconcile import Reconciler

    for h in range(-3, 2):
        _drop_hour(drop, h, RATES)
    clock.t = T0 + 1 * HOUR_S + 400
    _tick(svc)
    warm = svc.journal_store.run_set_at(int(clock.t))
    card = sorted(warm)[0]
    others = [c for c in RATES if c != card]
    for h in range(2, 4):
        _drop_hour(drop, h, others)
    clock.t = T0 + 3 * HOUR_S + 200
    svc.ingest_job()
    check = Reconciler(svc.journal_store, svc.store.reconcile, clock, SILENT_AFTER_S)  # the check alone: no decision moves it
    assert check.run() == 1
    assert check.run() == 0
    _drop_hour(drop, 4, RATES)
    clock.t = T0 + 4 * HOUR_S + 400
    svc.ingest_job()
    assert check.run() == 1
    states = [r.detail["state"] for r in svc.journal_store.decisions(kinds=["reconcile"], card_key=card)]
    assert states == ["seen", "cleared"]


def _row(key: str, kind: str, card: str, reason: str = "") -> JournalRow:
    return JournalRow(1, key, T0, kind, card, reason, {}, None)


@pytest.mark.parametrize(
    "case, journal_open, not_carried, retired, silent, evicted, cards, left_out, put_back",
    [
        ("an add set aside: not running", {"a", "b"}, {"a": (_row("k:add:a", "add", "a"), False)}, {}, {}, set(),
         {"b"}, {"a"}, set()),
        ("a release set aside: still running", {"b"}, {"a": (_row("k:release:a", "release", "a"), True)}, {}, {},
         set(), {"a", "b"}, set(), {"a"}),
        ("a release set aside after an add set aside: never ran", {"b"}, {"a": (_row("k:release:a", "release", "a"),
                                                                                False)}, {}, {}, set(),
         {"b"}, set(), set()),
        ("an evicted card whose release was set aside stays out", {"b"},
         {"a": (_row("k:release:a", "release", "a"), True)}, {}, {}, {"a"}, {"b"}, set(), set()),
        ("retired by hand: out", {"a", "b"}, {}, {"a": _row("retire:a", "retire", "a", "gone")}, {}, set(),
         {"b"}, {"a"}, set()),
        ("silent: out", {"a", "b"}, {}, {}, {"b": "not serving"}, set(), {"a"}, {"b"}, set()),
    ],
)
def test_known_run_set(case, journal_open, not_carried, retired, silent, evicted, cards, left_out, put_back):
    from fleet.service.reconcile import known_run_set

    known = known_run_set(journal_open, not_carried, retired, silent, evicted)
    assert (set(known.cards), set(known.left_out), set(known.put_back)) == (cards, left_out, put_back), case
    assert set(retired) | set(silent) <= known.ineligible


@pytest.mark.parametrize(
    "case, actions, runs",
    [
        ("an add that stands", [("add", True)], True),
        ("an add set aside: as before it, not running", [("add", False)], False),
        ("a release set aside: as before it, running", [("release", False)], True),
        ("an add and a release, both expired: never ran", [("add", False), ("release", False)], False),
        ("an add carried out, its release expired: runs", [("add", True), ("release", False)], True),
        ("an add, a release carried out, a second add expired", [("add", True), ("release", True), ("add", False)], False),
        ("an eviction carried out, then a release expired", [("evict", True), ("release", False)], False),
    ],
)
def test_pool_runs(case, actions, runs):
    from fleet.service.reconcile import pool_runs

    rows = [(_row(f"k:{kind}:{i}", kind, "a"), stands) for i, (kind, stands) in enumerate(actions)]
    assert pool_runs(rows) is runs, case


@pytest.mark.parametrize("value", ["0", "-5", '"two hours"'])
def test_silent_after_s_is_validated(tmp_path, value):
    from fleet.core.errors import ConfigError
    from fleet.service.config import load_service_config

    (tmp_path / "f.toml").write_text(f"[reconcile]\nsilent_after_s = {value}\n")
    with pytest.raises(ConfigError, match="silent_after_s"):
        load_service_config(tmp_path / "f.toml")
    (tmp_path / "g.toml").write_text("[reconcile]\nsilent_after = 60\n")
    with pytest.raises(ConfigError, match="silent_after"):
        load_service_config(tmp_path / "g.toml")
    assert load_service_config(None).reconcile.silent_after_s == 7200
