"""A malformed database URL in any command: one `fleet: error:` line naming the URL with its password masked, exit
2, and no piece of the password in stdout, stderr or the logs, whatever the password holds (`@ : / % # ?`)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys

import pytest
from hypothesis import strategies as st

from tests.ingest.props import fast_and_slow

T0 = 1_767_225_600
SECRET = "TOPSECRET42"
MALFORMED = {
    "an @ in the password": f"postgresql+psycopg://fleet:pa@ss:{SECRET}@127.0.0.1:55432/fleet",
    "an @ and a / in the password": f"postgresql+psycopg://fleet:pa/{SECRET}@ss@127.0.0.1:55432/fleet",
    "an @ before the database": f"postgresql+psycopg://fleet:pa@{SECRET}/x@127.0.0.1/fleet",
    "a port that is no number": f"postgresql+psycopg://fleet:{SECRET}@127.0.0.1:fivefour/fleet",
}
COMMANDS = {
    "status": ["status"],
    "ingest": ["ingest", "t.csv"],
    "ingest --demand": ["ingest", "--demand", "d.csv"],
    "db current": ["db", "current"],
    "db upgrade": ["db", "upgrade"],
    "journal": ["journal"],
    "explain": ["explain", "gpu-1"],
    "card retire": ["card", "retire", "gpu-1", "--reason", "gone"],
    "serve": ["serve", "--simulate", "noise-evictor", "--exit-when-done"],
}


def run(args: list[str], cwd, url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLEET_DB": url, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_malformed_database_url_is_one_line_exit_2_and_no_password(tmp_path, command):
    (tmp_path / "t.csv").write_text(f"card_id,ts,tokens_per_s\ngpu-1,{T0},6000\n")
    (tmp_path / "d.csv").write_text(f"ts,demand_tps\n{T0},6000\n")
    for what, url in MALFORMED.items():
        p = run(COMMANDS[command], tmp_path, url)
        assert SECRET not in p.stdout + p.stderr, (what, p.stderr)
        assert "Traceback" not in p.stderr and p.returncode == 2, (what, p.stderr)
        [line] = p.stderr.splitlines()
        assert line.startswith("fleet: error: database URL 'postgresql+psycopg://fleet:***@"), (what, line)
    port = run(COMMANDS[command], tmp_path, MALFORMED["a port that is no number"])
    assert port.stderr.endswith(": port 'fivefour' is not a number\n")


# -- any password: a property ------------------------------------------------------------------------------------

PIECES = [f"PWPIECE{i}" for i in range(6)]  # the password's words: none may be printed, whole or in part
SEPARATORS = st.text(alphabet="@:/%#?", min_size=1, max_size=3)


@st.composite
def passwords(draw) -> str:
    words = draw(st.lists(st.sampled_from(PIECES), min_size=1, max_size=4))
    seps = draw(st.lists(SEPARATORS, min_size=len(words), max_size=len(words)))
    lead = draw(st.sampled_from(["", "@", ":", "%", "#"]))
    return lead + "".join(w + s for w, s in zip(words, seps))


def _fleet(args: list[str]) -> tuple[int, str, str]:
    """`fleet ARGS` in this process: (exit status, what it printed, what it logged at any level)."""
    from fleet.cli.app import main

    out, err, logged = io.StringIO(), io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(logged)
    root = logging.getLogger()
    root.addHandler(handler)
    saved, root.level = root.level, logging.DEBUG
    argv, sys.argv = sys.argv, ["fleet", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                status = 0
            except SystemExit as done:
                status = done.code if isinstance(done.code, int) else 1
    finally:
        sys.argv = argv
        root.removeHandler(handler)
        root.level = saved
    return status, out.getvalue() + err.getvalue(), logged.getvalue()


def _password_body(password, port, command):
    """A URL with any password and any port: never a piece of the password printed or logged, never a traceback,
    and exit 2 (a URL that cannot be used, or no server at port 1)."""
    url = f"postgresql+psycopg://fleet:{password}@127.0.0.1:{port}/fleet"
    status, text, logged = _fleet([*command, "--db", url])
    assert "PWPIECE" not in text + logged, text + logged
    assert status == 2 and text.startswith("fleet: error: database") and text.count("\n") == 1, text


test_no_password_is_ever_shown, test_no_password_is_ever_shown_100k = fast_and_slow(
    _password_body, password=passwords(), port=st.sampled_from(["1", "x1", "", "1@2", "1/2"]),
    command=st.sampled_from([["status"], ["db", "current"], ["journal"]]))
