"""`fleet card retire ID --reason ...`: a card gone by hand leaves the run set, is never added back nor counted, and
the journal, `fleet explain` and `fleet status` say who retired it and why; bad input is one line, exit status 2."""

from __future__ import annotations

import getpass
import json

import pytest
from sqlalchemy import text

from fleet.service.calendar import HOUR_S
from storage import make_engine
from tests.service.test_reconcile import RATES, T0, _drop_hour, _tick, pool  # noqa: F401  (pool: the fixture)
from tests.service.test_service import run_cli


def _decisions(url: str) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT COUNT(*) FROM decisions")).scalar_one())
    finally:
        engine.dispose()


@pytest.fixture
def served(pool, monkeypatch):  # noqa: F811
    """A real pool served for three hours, every card heard from throughout; the command reads the pool's clock."""
    svc, clock, drop, db = pool
    monkeypatch.setattr("fleet.cli.card._now", clock.now)
    for h in range(-3, 3):
        _drop_hour(drop, h, RATES)
    clock.t = T0 + 2 * HOUR_S + 400
    _tick(svc)
    return svc, clock, drop, db


def test_a_retired_card_leaves_the_run_set_and_is_never_added_back(served, capsys):
    svc, clock, drop, db = served
    warm = svc.journal_store.run_set_at(T0 + 2 * HOUR_S)
    assert "gpu-a" in warm  # the best tokens per dollar
    code, out, err = run_cli(capsys, "card", "retire", "gpu-a", "--reason", "fan failure, pulled from rack 4", "--db", db, "--json")
    assert code == 0, err
    said = json.loads(out)
    assert said["card"] == "gpu-a" and said["by"] == getpass.getuser() and said["reason"] == "fan failure, pulled from rack 4"
    (rec,) = svc.journal_store.decisions(kinds=["retire"])
    assert rec.card_key == "gpu-a" and rec.detail == {"by": getpass.getuser(), "reason": "fan failure, pulled from rack 4"}
    assert getpass.getuser() in rec.reason
    for h in range(3, 6):  # gpu-a still sends its (best) telemetry: it is never chosen again
        _drop_hour(drop, h, RATES)
        clock.t = T0 + h * HOUR_S + 400
        _tick(svc)
    sizes = {r.ts: r.detail for r in svc.journal_store.decisions(kinds=["size"])}
    assert "retired by hand" in sizes[T0 + 3 * HOUR_S]["not_counted"]["gpu-a"]
    for h in range(3, 6):
        assert "gpu-a" not in svc.journal_store.run_set_at(T0 + h * HOUR_S)
        assert len(svc.journal_store.run_set_at(T0 + h * HOUR_S)) == len(warm)  # replaced
    assert [r.ts for r in svc.journal_store.decisions(kinds=["add"], card_key="gpu-a")] == [T0]  # only its first add

    code, out, err = run_cli(capsys, "explain", "gpu-a", "--db", db, "--json")
    assert code == 0, err
    assert json.loads(out)["retired"]["reason"] == "fan failure, pulled from rack 4"
    code, out, err = run_cli(capsys, "explain", "gpu-a", "--db", db)
    assert "gpu-a was retired by hand at " in out and f"by {getpass.getuser()}: fan failure" in out
    code, out, err = run_cli(capsys, "status", "--db", db, "--json")
    assert [r["card"] for r in json.loads(out)["retired"]] == ["gpu-a"]
    code, out, err = run_cli(capsys, "journal", "--db", db, "--kind", "retire")
    assert code == 0 and "gpu-a" in out and "fan failure" in out


@pytest.mark.parametrize(
    "args, line",
    [
        (["gpu-zz", "--reason", "gone"], "fleet: error: card 'gpu-zz': not in the database 'sqlite:///{path}'"),
        (["gpu-a"], "fleet: error: fleet card retire: --reason is required: say why the card is gone (it is kept in the journal)"),
        (["gpu-a", "--reason", "  "], "fleet: error: fleet card retire: --reason is required: say why the card is gone (it is kept in the journal)"),
        (["gpu-a", "--reason", "x" * 100_000], "fleet: error: fleet card retire: --reason is 100,000 characters: at most 500 "
                                               "(it is printed by status and the journal)"),
    ],
    ids=["unknown card", "no reason", "blank reason", "a reason of 100,000 characters"],
)
def test_bad_input_is_one_line_and_nothing_written(served, capsys, args, line):
    svc, clock, drop, db = served
    before = _decisions(db)
    code, out, err = run_cli(capsys, "card", "retire", *args, "--db", db)
    assert code == 2 and err.strip() == line.format(path=db.removeprefix("sqlite:///")) and out == ""
    assert _decisions(db) == before


def test_a_card_retired_already_is_refused(served, capsys):
    svc, clock, drop, db = served
    assert run_cli(capsys, "card", "retire", "gpu-c", "--reason", "sold", "--db", db)[0] == 0
    before = _decisions(db)
    code, out, err = run_cli(capsys, "card", "retire", "gpu-c", "--reason", "sold again", "--db", db)
    assert code == 2 and err.strip() == "fleet: error: card 'gpu-c': retired already (`fleet explain gpu-c` says when and why)"
    assert _decisions(db) == before


def test_no_store_there_is_refused_and_not_created(tmp_path, capsys):
    code, out, err = run_cli(capsys, "card", "retire", "gpu-a", "--reason", "gone", "--db", f"sqlite:///{tmp_path / 'none.db'}")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no such file" in err
    assert not (tmp_path / "none.db").exists()


def test_help_says_what_it_does(capsys):
    code, out, err = run_cli(capsys, "card", "retire", "--help")
    assert code == 0 and "--reason" in out and "never added back" in out and "Exit status" in out
