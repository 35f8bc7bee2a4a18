"""The words a user meets first: bare `fleet` says what is missing, every `--set` error is told one way, and the
line on a clairvoyant policy is a whole sentence.

Before: bare `fleet` printed the help, then `fleet: error: fleet:  (see fleet -h)`; a `--set` error began either
`override 'KEY=VALUE': ...` or `--set KEY=VALUE: ...`, the second in the validator's words ("Input should be a
valid number, unable to parse string as a number"); and every verdict's `demand:` line ended "...clairvoyant
view): no real autoscaler can", which reads as cut off."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fleet.report.verdict import demand_line

FLEET = [sys.executable, "-m", "fleet.cli.app"]


def _fleet(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*FLEET, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("words", [[], ["db"], ["card"]], ids=["fleet", "fleet db", "fleet card"])
def test_a_command_group_without_a_command_says_one_is_needed(words, tmp_path):
    p = _fleet(*words, cwd=tmp_path)
    path = " ".join(["fleet", *words])
    assert p.returncode == 2
    assert "Usage:" in p.stdout  # the help, which lists the commands the line points to
    assert p.stderr.splitlines() == [f"fleet: error: {path}: no command given: name one of the commands above "
                                     f"(see {path} -h)"]


SETS = [
    ("foo", "expected KEY=VALUE"),
    ("=1", "empty key"),
    ("foo=1", "unknown key 'foo'"),
    ("policy=1", "'policy' is a table, set one of its keys"),
    ("classes.x=1", "expected classes.CLASS.KEY=VALUE"),
    ("classes.flagship.colour=red", "unknown key 'colour' for a card class"),
    ("classes.nosuch.rated_tps=1", "no card class named 'nosuch'"),
    ("policy.headroom=abc", "should be a number, got 'abc'"),
    ("classes.flagship.pool_cards=abc", "should be a whole number, got 'abc'"),
    ("policy.window=fortnight", "unknown window 'fortnight' (known: day, hour, week, or a number of hours like 36h)"),
]


@pytest.mark.parametrize("assignment, reason", SETS, ids=[a for a, _ in SETS])
def test_every_set_error_is_told_one_way(assignment, reason, tmp_path):
    p = _fleet("replay", "-p", "noise-evictor", "--set", assignment, cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [f"fleet: error: --set {assignment}: {reason}"]


def test_the_line_on_a_clairvoyant_policy_is_a_whole_sentence(tmp_path):
    p = _fleet("replay", "-p", "noise-evictor", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    line = demand_line({"knew_demand": True})
    assert line == "demand: the policy knew each hour's demand ahead (forecast \"known\"), which no real autoscaler does"
    assert [x.strip() for x in p.stdout.splitlines() if x.strip().startswith("demand:")] == [line]
