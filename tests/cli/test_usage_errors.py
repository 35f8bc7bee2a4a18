"""A usage error of the option parser is one `fleet: error:` line naming the input and the reason, status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fleet.cli.usage import reworded

FLEET = [sys.executable, "-m", "fleet.cli.app"]

CASES = [
    (["replay", "-p", "noise-evictor", "--seeds", "-3"], "fleet: error: --seeds -3: should be 1 or more (see fleet replay -h)"),
    (["compare", "-p", "noise-evictor", "--months", "0"], "fleet: error: --months 0: should be 1 or more (see fleet compare -h)"),
    (["compare", "-p", "noise-evictor", "--months=200000"],
     "fleet: error: --months 200000: should be 100000 or less (see fleet compare -h)"),
    (["replay", "-p", "noise-evictor", "--seed", "abc"], "fleet: error: --seed abc: should be a whole number (see fleet replay -h)"),
    (["bogus"], "fleet: error: no command 'bogus' (see fleet -h)"),
    (["db", "bogus"], "fleet: error: fleet db: no command 'bogus' (see fleet db -h)"),
    (["ingest", "a.csv", "b.csv"], "fleet: error: fleet ingest: unexpected argument(s) b.csv: give one at a time (see fleet ingest -h)"),
    (["compare"], "fleet: error: fleet compare: missing option --preset / -p (see fleet compare -h)"),
    (["replay", "-p"], "fleet: error: fleet replay: option '-p' requires an argument (see fleet replay -h)"),
    (["replay", "-x"], "fleet: error: fleet replay: no such option: -x (see fleet replay -h)"),
]


@pytest.mark.parametrize("args, line", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_usage_error_is_one_line_with_status_2(args, line, tmp_path):
    p = subprocess.run([*FLEET, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [line]
    assert p.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing made


def test_validator_wording_is_reworded():
    assert reworded("Input should be greater than or equal to 1") == "should be 1 or more"
    assert reworded("Input should be less than 0.5") == "should be less than 0.5"
    assert reworded("Input should be a valid number, unable to parse string as a number") == "should be a number"
    assert reworded("No such option: -x") == "no such option: -x"
