"""Acting by kind of failure, stepped on an injected clock and a seeded draw: done, retried with backoff within the
budget, set aside with a record, expired; journal order per card, one card's failure never holding another's."""

from __future__ import annotations

import json
import random
import sys

import pytest

from fleet.core.retry import PERMANENT, TRANSIENT, NextStep, RetryRules, Tries, after_failure, backoff_s
from fleet.service.acting import ActuatorError, ActuatorStopped, LogLimiter
from fleet.service.actuators import Command
from fleet.service.journal import Journal
from storage.repository import sqlite_memory_repository
from storage.service_store import JournalEntry, ServiceStore

HOUR = 3600
T0 = 1_767_225_600


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


class Scripted:
    """An actuator that answers each decision key from a script (an outcome, or None for done) and logs its calls."""

    name = "scripted"

    def __init__(self, fail: dict[str, tuple[str, int]] | None = None):
        self.fail = dict(fail or {})  # key -> (outcome, max_tries)
        self.calls: list[str] = []

    def act(self, row, epoch=None):
        self.calls.append(row.key)
        if row.key in self.fail:
            outcome, tries = self.fail[row.key]
            raise ActuatorError(f"refused {row.key}", outcome, tries)

    def close(self):
        pass


def _store(hours: dict[int, list[tuple[str, str]]]) -> ServiceStore:
    """A store with a journal of (kind, card) actions at each hour."""
    repo = sqlite_memory_repository()
    repo.declare_cards({c: "flagship" for acts in hours.values() for _, c in acts}, 0)
    store = ServiceStore(repo.engine)
    for h, acts in sorted(hours.items()):
        entries = [JournalEntry(f"{h}:size", h, "size", "", acted=True)]
        entries += [JournalEntry(f"{h}:{k}:{c}", h, k, "why", c) for k, c in acts]
        store.journal_hour(h, entries, {}, [], [])
    return store


def _journal(store, actuator, clock, **rules) -> Journal:
    return Journal(store, actuator, clock, RetryRules(**rules), rng=random.Random(7))


def test_backoff_doubles_with_jitter_up_to_its_cap():
    rules = RetryRules(first_backoff_s=1, max_backoff_s=60)
    assert [backoff_s(rules, n, 0.0) for n in (1, 2, 3, 4, 10)] == [0.5, 1, 2, 4, 30]
    assert [backoff_s(rules, n, 0.999999) for n in (1, 7, 8)] == pytest.approx([1, 60, 60], rel=1e-5)


def test_a_transient_failure_is_retried_until_the_budget_then_set_aside():
    rules = RetryRules(max_retry_s=900, first_backoff_s=1, max_backoff_s=120)
    v, t, steps = None, 0.0, 0
    while True:
        v = after_failure(rules, v.tries if v else None, TRANSIENT, "503", t, 0.5)
        steps += 1
        if v.step is not NextStep.RETRY:
            break
        t = v.tries.next_ts
    assert v.step is NextStep.SET_ASIDE and v.tries.count == steps and "900 s of retries" in v.reason
    assert t <= 900 and 5 < steps < 20  # bounded by the budget, not by luck
    assert after_failure(rules, None, PERMANENT, "400", 0, 0.5).step is NextStep.SET_ASIDE
    assert after_failure(rules, Tries(1, 0, 0), PERMANENT, "exit 1", 1, 0.5, max_tries=3).step is NextStep.RETRY
    assert after_failure(rules, Tries(2, 0, 0), PERMANENT, "exit 1", 2, 0.5, max_tries=3).step is NextStep.SET_ASIDE


def test_one_cards_permanent_failure_is_set_aside_and_holds_no_other_card():
    store = _store({T0: [("add", "a"), ("add", "b")], T0 + HOUR: [("release", "a"), ("release", "b")]})
    act = Scripted({f"{T0}:add:a": (PERMANENT, 3)})
    clock = Clock(T0 + HOUR + 10)
    j = _journal(store, act, clock)
    out = j.act_pending()
    # a's add failed (try 1 of 3): a's release waits behind it; b's add and release go ahead.
    assert (out.acted, out.failed, out.retried) == (2, 1, 1)
    assert act.calls == [f"{T0}:add:a", f"{T0}:add:b", f"{T0 + HOUR}:release:b"]
    assert j.act_pending().acted == 0 and len(act.calls) == 3  # within the backoff: not tried again
    for _ in range(2):
        clock.t += 300
        j.act_pending()
    assert act.calls.count(f"{T0}:add:a") == 3
    assert act.calls[-1] == f"{T0 + HOUR}:release:a"  # set aside, so the card's next action runs
    assert store.unacted() == []
    (rec,) = store.decisions(kinds=["act-failed"])
    assert rec.card_key == "a" and rec.detail["decision_key"] == f"{T0}:add:a" and rec.detail["tries"] == 3
    assert "set aside after 3 tries" in rec.reason and "refused" in rec.reason
    assert [r.acted_ts for r in store.decisions(kinds=["add"]) if r.card_key == "a"] == [None]  # never marked done
    assert j.acting.counts == {"done": 3, "retried": 2, "set-aside": 1, "expired": 0}


def test_a_transient_failure_for_an_hour_is_tried_only_within_its_budget():
    store = _store({T0: [("add", "a"), ("add", "b")]})
    act = Scripted({f"{T0}:add:a": (TRANSIENT, 1)})
    clock = Clock(T0 + 10)
    j = _journal(store, act, clock, max_retry_s=900, expire_after_s=0)
    while clock.t < T0 + HOUR:  # a pass every 10 s for an hour
        j.act_pending()
        clock.t += 10
    tries = act.calls.count(f"{T0}:add:a")
    (rec,) = store.decisions(kinds=["act-failed"])
    assert rec.detail["tries"] == tries and rec.detail["outcome"] == "transient"
    assert rec.ts - rec.detail["first_try_ts"] <= 900
    assert act.calls.count(f"{T0}:add:b") == 1 and store.unacted() == []


def test_a_decision_too_late_is_expired_with_a_record_and_never_acted():
    store = _store({T0: [("add", "a")], T0 + 10 * HOUR: [("add", "b")]})
    act = Scripted()
    j = _journal(store, act, Clock(T0 + 10 * HOUR + 5), expire_after_s=6 * HOUR)
    out = j.act_pending()
    assert (out.acted, out.expired) == (1, 1) and act.calls == [f"{T0 + 10 * HOUR}:add:b"]
    (rec,) = store.decisions(kinds=["act-expired"])
    assert rec.detail["decision_key"] == f"{T0}:add:a" and store.unacted() == []


class Reads:
    """A store that records where each acting pass starts reading the journal."""

    def __init__(self, store):
        self.store, self.from_ids = store, []

    def unacted(self, from_id=0):
        self.from_ids.append(from_id)
        return self.store.unacted(from_id)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_a_pass_starts_where_the_last_left_an_action_open_and_a_new_epoch_reads_all():
    """Closed decisions (expired, set aside) stay unacted for good: a pass reads from the first decision the last
    one left open, not the whole journal, yet a decision waiting for its retry, and its card's later ones, are
    read again; a new epoch reads from the start."""
    store = _store({T0: [("add", "a")], T0 + 10 * HOUR: [("add", "b"), ("add", "c")], T0 + 11 * HOUR: [("add", "c")]})
    reads = Reads(store)
    clock = Clock(T0 + 11 * HOUR + 5)
    act = Scripted(fail={f"{T0 + 10 * HOUR}:add:c": (TRANSIENT, 1)})
    j = Journal(reads, act, clock, RetryRules(expire_after_s=6 * HOUR, first_backoff_s=60), rng=random.Random(7))
    out = j.act_pending(epoch=1)
    assert (out.acted, out.expired, out.retried) == (1, 1, 1)  # a expired, b done, c waits for its retry
    waiting = next(r.id for r in store.unacted() if r.key == f"{T0 + 10 * HOUR}:add:c")
    act.fail.clear()
    clock.t += 3600
    out = j.act_pending(epoch=1)
    assert out.acted == 2 and reads.from_ids == [0, waiting]  # c and then its later action, in order
    assert act.calls[-2:] == [f"{T0 + 10 * HOUR}:add:c", f"{T0 + 11 * HOUR}:add:c"]
    last_action = max(r.id for r in store.decisions() if r.kind == "add")
    j.act_pending(epoch=1)
    j.act_pending(epoch=2)
    assert reads.from_ids[2:] == [last_action + 1, 0] and store.unacted() == []


def test_lateness_is_judged_in_wall_seconds_on_a_fast_clock():
    store = _store({T0: [("add", "a")]})
    j = Journal(store, Scripted(), Clock(T0 + 100 * HOUR), RetryRules(expire_after_s=HOUR),
                wall_seconds=lambda s: s / 36_000)
    assert j.act_pending().acted == 1


def test_a_stopping_actuator_counts_no_try_and_marks_nothing():
    store = _store({T0: [("add", "a"), ("add", "b")]})

    class Stopping(Scripted):
        def act(self, row, epoch=None):
            self.calls.append(row.key)
            raise ActuatorStopped("the service is stopping")

    j = _journal(store, Stopping(), Clock(T0 + 10))
    out = j.act_pending()
    assert (out.acted, out.failed) == (0, 0) and j.actuator.calls == [f"{T0}:add:a"]
    assert len(store.unacted()) == 2 and j.acting.tries == {}


def test_failed_tries_are_logged_one_line_each_and_rate_limited(caplog):
    now = Clock(0.0)
    lim = LogLimiter(burst=2, every_s=60, monotonic=now)
    with caplog.at_level("WARNING", logger="fleet.service.journal"):
        for _ in range(5):
            lim.warning("failed %s", "x")
        now.t = 61
        lim.warning("failed %s", "y")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["failed x", "failed x", "failed y (3 more failed tries not logged)"]


@pytest.mark.parametrize("status, outcome", [(400, PERMANENT), (404, PERMANENT), (503, TRANSIENT), (500, TRANSIENT),
                                             (429, TRANSIENT)])
def test_a_webhooks_answer_is_its_outcome(status, outcome):
    from fleet.service.actuators import Webhook
    from tests.service.test_webhook import Receiver

    hook = Receiver(status)
    try:
        store = _store({T0: [("add", "a")]})
        with pytest.raises(ActuatorError) as err:
            Webhook(hook.url, 5).act(store.unacted()[0])
        assert err.value.outcome == outcome
        j = _journal(store, Webhook(hook.url, 5), Clock(T0 + 10))
        out = j.act_pending()
        assert (out.set_aside, out.retried) == ((1, 0) if outcome == PERMANENT else (0, 1))
    finally:
        hook.close()


def _script(tmp_path, body: str) -> list[str]:
    path = tmp_path / "act.py"
    path.write_text(body)
    return [sys.executable, str(path)]


@pytest.mark.parametrize("code, outcome", [(75, TRANSIENT), (1, PERMANENT), (2, PERMANENT)])
def test_a_commands_exit_status_is_its_outcome(tmp_path, code, outcome):
    store = _store({T0: [("add", "a")]})
    cmd = Command(_script(tmp_path, f"import sys; sys.exit({code})"), retries=2)
    with pytest.raises(ActuatorError) as err:
        cmd.act(store.unacted()[0])
    assert err.value.outcome == outcome and err.value.max_tries == (1 if outcome == TRANSIENT else 3)


def test_the_commands_environment_holds_only_what_the_config_names(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_DB", "postgresql+psycopg://fleet:SECRET@db/fleet")
    monkeypatch.setenv("HOOK_TOKEN", "SECRET-TOKEN")
    monkeypatch.setenv("MY_REGION", "eu-1")
    out = tmp_path / "env.json"
    store = _store({T0: [("add", "a")]})
    cmd = Command(_script(tmp_path, f"import json, os, pathlib; pathlib.Path({str(out)!r}).write_text(json.dumps(dict(os.environ)))"),
                  pass_env=("PATH", "MY_REGION", "NOT_SET"), env={"POOL": "west"})
    cmd.act(store.unacted()[0], epoch=4)
    got = json.loads(out.read_text())
    got.pop("LC_CTYPE", None)  # the supervisor's Python may coerce the C locale and say so
    assert set(got) == {"PATH", "MY_REGION", "POOL", "FLEET_LEASE_EPOCH", "FLEET_DECISION_ID", "FLEET_DECISION_KEY",
                        "FLEET_DECISION_KIND", "FLEET_CARD", "FLEET_DECISION_TS"}
    assert got["FLEET_LEASE_EPOCH"] == "4" and got["FLEET_CARD"] == "a" and got["POOL"] == "west"
    assert "SECRET" not in json.dumps(got)


def test_the_config_refuses_to_pass_the_database_url():
    from fleet.service.actuators import CommandSettings

    with pytest.raises(ValueError, match="FLEET_DB"):
        CommandSettings(command=("true",), pass_env=("PATH", "FLEET_DB"))
    with pytest.raises(ValueError, match="FLEET_DECISION_KEY"):
        CommandSettings(command=("true",), env={"FLEET_DECISION_KEY": "x"})


def test_a_webhook_refusing_one_card_and_down_for_ten_minutes_loses_and_doubles_nothing():
    """400 for card a always, 503 for everyone during the first ten minutes of the clock, then 2xx: every other
    card's action is done exactly once after the outage, a's are set aside after one try each."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    from fleet.service.actuators import Webhook

    clock = Clock(T0 + 2 * HOUR)
    outage_until = clock.t + 600
    done: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            code = 400 if body["card"] == "a" else 503 if clock.t < outage_until else 200
            if code == 200:
                done.append(body["key"])
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hours = {T0 + h * HOUR: [("add", c) for c in "abc"] if h == 0 else [("release", c) for c in "abc"] for h in (0, 1)}
        store = _store(hours)
        j = _journal(store, Webhook(f"http://127.0.0.1:{server.server_address[1]}/act", 5), clock,
                     max_retry_s=900, expire_after_s=0)
        while clock.t < T0 + 3 * HOUR:  # a pass every 10 s for an hour
            j.act_pending()
            clock.t += 10
    finally:
        server.shutdown()
        server.server_close()
    others = sorted(f"{T0 + h * HOUR}:{k}:{c}" for h, k in ((0, "add"), (1, "release")) for c in "bc")
    assert sorted(done) == others  # each once: none lost, none doubled
    aside = store.decisions(kinds=["act-failed"])
    assert sorted(r.detail["decision_key"] for r in aside) == [f"{T0}:add:a", f"{T0 + HOUR}:release:a"]
    assert all(r.detail["tries"] == 1 and r.detail["outcome"] == "permanent" for r in aside)
    assert store.unacted() == [] and j.acting.counts["done"] == 4 and j.acting.counts["retried"] > 0


def test_the_config_refuses_to_pass_a_credential(tmp_path):
    from fleet.core.errors import ConfigError
    from fleet.service.config import load_service_config

    path = tmp_path / "fleet.toml"
    path.write_text('[actuator]\nkind = "command"\n[actuator.command]\ncommand = ["true"]\npass_env = ["PATH", "PROM_TOKEN"]\n\n'
                    '[ingest.sources.prometheus]\nprometheus_url = "http://127.0.0.1:9090"\nauth = {bearer_token_env = "PROM_TOKEN"}\n')
    with pytest.raises(ConfigError, match=r"actuator\.command\.pass_env: 'PROM_TOKEN' holds a credential"):
        load_service_config(path)
