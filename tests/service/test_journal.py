"""The journal: decisions are written before they are acted on, and acted on once, crashes included."""

from __future__ import annotations

import sys
import textwrap

import pytest

from fleet.presets import load_preset
from fleet.service.journal import ACTIONS, ActuatorError, Journal
from fleet.presets import replay_scenario
from storage.repository import open_repository, sqlite_memory_repository
from storage.service_store import JournalEntry, ServiceStore
from tests.service.serving import TINY_PRESET, Served, wait_for

# A shell actuator (quick to start): it blocks on the first eviction until killed, and logs each key it carries out.
# As a receiver must, it drops a key it has carried out already: the killed pass's unmarked batch is offered again.
ACTUATOR = textwrap.dedent(
    """\
    #!/bin/sh
    work="$1"
    if grep -qxF "$FLEET_DECISION_KEY" "$work/acted.log" 2>/dev/null; then
        exit 0  # a repeat: done already, not done again
    fi
    if [ "$FLEET_DECISION_KIND" = evict ] && [ ! -e "$work/blocked" ]; then
        printf %s "$FLEET_DECISION_KEY" > "$work/blocked.tmp" && mv "$work/blocked.tmp" "$work/blocked"
        exec sleep 600
    fi
    echo "$FLEET_DECISION_KEY" >> "$work/acted.log"
    """
)


def test_sigkill_between_journal_and_act_acts_each_decision_once(tmp_path):
    (tmp_path / "tiny.toml").write_text(TINY_PRESET)
    (tmp_path / "actuator.sh").write_text(ACTUATOR)
    (tmp_path / "fleet.toml").write_text(f'[actuator]\nkind = "command"\n[actuator.command]\n'
                                         f'command = ["/bin/sh", "{tmp_path / "actuator.sh"}", "{tmp_path}"]\n')
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    args = ["--config", str(tmp_path / "fleet.toml"), "--simulate", str(tmp_path / "tiny.toml"), "--speed", "1e7",
            "--db", db, "--metrics-port", "0"]
    first = Served(args, tmp_path, "first")
    try:
        wait_for(lambda: (tmp_path / "blocked").exists(), 60, "the actuator to block on the first eviction")
        store = ServiceStore(open_repository(db).engine)
        blocked_key = (tmp_path / "blocked").read_text()
        pending = store.unacted()
        assert blocked_key in {r.key for r in pending}  # journaled before acting
        acted_before = (tmp_path / "acted.log").read_text().split()
    finally:
        first.kill()  # SIGKILL, actuator included
    assert first.proc.returncode == -9
    assert blocked_key not in acted_before

    second = Served(args + ["--exit-when-done"], tmp_path, "second")
    assert second.proc.wait(120) == 0, second.stderr()

    acted = (tmp_path / "acted.log").read_text().split()
    assert len(acted) == len(set(acted)), "a decision was acted on twice"
    journal = store.decisions()
    actions = [r for r in journal if r.kind in ACTIONS]
    assert sorted(acted) == sorted(r.key for r in actions)  # every action once, none lost
    assert all(r.acted_ts is not None for r in journal)
    assert acted_before == acted[: len(acted_before)]  # what was acted before the kill was not acted again

    # The budget held across the restart: replay's evictions, exactly.
    r = replay_scenario(load_preset(str(tmp_path / "tiny.toml")).resolve())
    evictions = store.decisions(kinds=["evict"])
    assert len(evictions) == r.figures["eviction_budget"] == 3
    assert [row.card_key for row in evictions] == [str(r.month.card_ids[e.card]) for e in r.evictions]
    assert store.decisions(kinds=["eviction-pass"])[-1].detail["budget_left_after"] == 0


class Recorder:
    name = "recorder"

    def __init__(self, fail_on: str | None = None):
        self.calls: list[str] = []
        self.fail_on = fail_on

    def act(self, row, epoch=None):
        if row.key == self.fail_on:
            raise ActuatorError("refused")
        self.calls.append(row.key)


def _store_with_cards():
    repo = sqlite_memory_repository()
    repo.declare_cards({"a": "flagship", "b": "flagship"}, 0)
    return ServiceStore(repo.engine)


def test_journal_hour_is_written_once_and_acts_in_order():
    store = _store_with_cards()
    entries = [
        JournalEntry("100:size", 100, "size", "sized", acted=True),
        JournalEntry("100:evict:a", 100, "evict", "slow", "a"),
        JournalEntry("100:add:b", 100, "add", "needed", "b"),
    ]
    assert store.journal_hour(100, entries, {"b": "warm"}, [], ["a"])
    assert not store.journal_hour(100, entries, {"b": "warm"}, [], ["a"])  # a rerun of the hour adds nothing
    assert len(store.decisions()) == 3 and store.run_set_at(100) == {"b"}
    assert store.retired() == {"a": 100}
    rec = Recorder()
    out = Journal(store, rec, lambda: 200).act_pending()
    assert out.acted == 2 and rec.calls == ["100:evict:a", "100:add:b"]
    assert Journal(store, rec, lambda: 300).act_pending().acted == 0 and len(rec.calls) == 2
    assert all(r.acted_ts is not None for r in store.decisions())


def test_a_failed_action_stays_pending_without_holding_another_cards():
    store = _store_with_cards()
    store.journal_hour(100, [JournalEntry("100:size", 100, "size", "", acted=True),
                             JournalEntry("100:evict:a", 100, "evict", "", "a"),
                             JournalEntry("100:add:b", 100, "add", "", "b")], {"b": "warm"}, [], ["a"])
    rec = Recorder(fail_on="100:evict:a")
    out = Journal(store, rec, lambda: 200).act_pending()
    assert out.failed == 1 and "refused" in out.error and out.acted == 1 and rec.calls == ["100:add:b"]
    assert [r.key for r in store.unacted()] == ["100:evict:a"]
    rec = Recorder()
    assert Journal(store, rec, lambda: 300).act_pending().acted == 1 and rec.calls == ["100:evict:a"]


def test_command_actuator_reports_a_failing_command(tmp_path):
    from fleet.service.actuators import Command

    store = _store_with_cards()
    store.journal_hour(100, [JournalEntry("100:add:a", 100, "add", "", "a")], {"a": "warm"}, [], [])
    row = store.unacted()[0]
    with pytest.raises(ActuatorError, match="exited 3"):
        Command([sys.executable, "-c", "import sys; sys.exit(3)"]).act(row)
    out = tmp_path / "got.json"
    Command([sys.executable, "-c", f"import sys, pathlib; pathlib.Path({str(out)!r}).write_text(sys.stdin.read())"]).act(row)
    assert '"key": "100:add:a"' in out.read_text()
