"""`fleet status`, `fleet explain` and `fleet serve`: the store they read, and the words and numbers they print.

Each test names the command as it ran before these were mended: its exit status and first line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.core.units import NO_END_TS
from tests.cli.served_month import serve_tiny_month
from tests.service.serving import FLEET, TINY_PRESET, Served
from tests.signals import read_pty, sigint_default

ROOT = Path(__file__).resolve().parents[2]
BARE_NUMBER = re.compile(r"(?<![\w.,:/\-$])\d{4,}(?![\w.,:/%\-])")


def fleet(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The tiny preset's month served in process on a simulated clock: a whole month's store, with evictions."""
    month = serve_tiny_month(tmp_path_factory.mktemp("served"))
    month.service.telemetry.engine.dispose()
    return month.url, month.service.journal_store


# -- FLEET_DB --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["status"], ["explain", "flagship-00000"]], ids=["status", "explain"])
def test_fleet_db_names_the_store(served, tmp_path, command):
    # Before: FLEET_DB was not read; `fleet status` opened ./fleet.db, created it, and exited 2 with
    # "fleet: error: database 'sqlite:///fleet.db': no billed hour yet ..." (explain: "... not in the database").
    url, _ = served
    got = fleet(*command, cwd=tmp_path, env={"FLEET_DB": url})
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("month from " if command == ["status"] else "flagship-00000 (flagship)")
    assert list(tmp_path.iterdir()) == []  # no ./fleet.db


def test_db_option_beats_fleet_db(served, tmp_path):
    url, _ = served
    got = fleet("status", "--db", url, cwd=tmp_path, env={"FLEET_DB": f"sqlite:///{tmp_path / 'other.db'}"})
    assert got.returncode == 0, got.stderr
    assert list(tmp_path.iterdir()) == []


def test_serve_takes_its_store_from_fleet_db(tmp_path):
    # Before: `FLEET_DB=sqlite:///x.db fleet serve --simulate ...` served into ./fleet.db.
    (tmp_path / "tiny.toml").write_text(TINY_PRESET)
    url = f"sqlite:///{tmp_path / 'from-env.db'}"
    got = subprocess.run(FLEET + ["serve", "--simulate", "tiny.toml", "--speed", "1e7", "--exit-when-done", "--metrics-port", "0"],
                         capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "FLEET_DB": url}, timeout=300)
    assert got.returncode == 0, got.stderr
    assert f"database {url}" in got.stderr
    assert (tmp_path / "from-env.db").is_file() and not (tmp_path / "fleet.db").exists()


# -- a store that is not there ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["status"], ["explain", "gpu-1"], ["plan"]], ids=["status", "explain", "plan"])
def test_a_mistyped_store_is_named_and_not_created(tmp_path, command):
    # Before: `fleet status --db sqlite:///typo.db` created an empty typo.db and exited 2 with
    # "fleet: error: ... no billed hour yet"; explain exited 2 with "card 'gpu-1': not in the database".
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    got = fleet(*command, "--db", url, cwd=tmp_path)
    assert got.returncode == 2
    assert got.stderr.splitlines() == [f"fleet: error: database '{url}': no such file; no store there (nothing was created)"]
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_no_store_is_left_as_it_was(tmp_path):
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    got = fleet("status", "--db", f"sqlite:///{empty}", cwd=tmp_path)
    assert got.returncode == 2 and "not a fleet store" in got.stderr
    assert empty.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_an_older_schema_is_the_upgrade_error(tmp_path):
    from storage import make_engine, upgrade

    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0001", engine=make_engine(url))
    got = fleet("status", "--db", url)
    assert got.returncode == 2 and "is at schema revision 0001" in got.stderr and "fleet db upgrade" in got.stderr


# -- fleet status's words ---------------------------------------------------------------------------------------------

def test_status_says_each_check_in_its_unit_and_the_order_of_the_cards(served):
    # Before: "check convergence: pass (ideal bill / real bill >= 90.0%; now 0.9...)", cards sorted by no stated key,
    # evicted cards listed among the spares with nothing to tell them apart.
    url, store = served
    got = fleet("status", "--db", url)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    conv = next(line for line in lines if line.startswith("check convergence"))
    assert re.search(r"now convergence \d+\.\d%\)$", conv), conv
    assert re.search(r"now unmet \d+\.\d\d% of demand\)$", next(line for line in lines if line.startswith("check capacity")))
    assert re.search(r"now \d+ wrong evictions?\)$", next(line for line in lines if line.startswith("check eviction")))
    header = next(line for line in lines if line.startswith("cards ("))
    assert "sorted by score 24h, highest first" in header
    evicted = {k for _, k in store.eviction_hours(0, NO_END_TS)}
    assert evicted
    at = next(i for i, line in enumerate(lines) if line.startswith("evicted this month"))
    main_rows = [line.split()[0] for line in lines[lines.index(header) + 2:at]]
    assert not evicted & set(main_rows)
    assert {line.split()[0] for line in lines[at + 2:]} == evicted
    # The cards' order is the stated one: the 24-hour score, highest first.
    scores = [float(line.split()[3].replace(",", "")) for line in lines[lines.index(header) + 2:at]]
    assert scores == sorted(scores, reverse=True)
    s = json.loads(fleet("status", "--db", url, "--json").stdout)
    assert set(s["evicted"]) == evicted


def test_serve_with_nothing_billed_says_so_instead_of_nan(tmp_path):
    # Before: `fleet serve --config docs/serve-config.example.toml` stopped with "... convergence nan%".
    served = Served(["--config", str(ROOT / "docs/serve-config.example.toml"), "--db", f"sqlite:///{tmp_path / 'x.db'}",
                     "--metrics-port", "0"], tmp_path)
    try:
        assert served.terminate() == 0
    finally:
        served.kill()
    last = served.stderr().strip().splitlines()[-1]
    assert last.startswith("fleet serve: stopped; 0 hours") and "nan" not in last
    assert last.endswith("0 evictions, convergence n/a until the first billed hour")


# -- fleet explain's words ------------------------------------------------------------------------------------------

def test_explain_counts_in_words_and_one_number_format(served):
    # Before: "... it joined the run set 1 times and left it 0 times", and "2867" beside "2,867".
    url, store = served
    cards = sorted({r.card_key for r in store.decisions(kinds=["add"])})
    said = []
    for card in cards:
        got = fleet("explain", card, "--db", url)
        assert got.returncode == 0, got.stderr
        assert not re.search(r"\b1 times\b|\b1 eviction passes\b", got.stdout), got.stdout
        assert BARE_NUMBER.findall(got.stdout) == [], got.stdout
        said.append(got.stdout)
    assert any(re.search(r"joined the run set 1 time and left it \d+ times?", s) for s in said)
    assert any(re.search(r"\d,\d{3} tok/s", s) for s in said)


def test_grouping_leaves_times_ids_and_decimals():
    from fleet.cli.words import grouped

    assert grouped("scored 2867 tok/s at 2026-01-02T00:00Z by flagship-00012, 0.1234 and 12345.5") == \
        "scored 2,867 tok/s at 2026-01-02T00:00Z by flagship-00012, 0.1234 and 12345.5"


# -- fleet status --watch -------------------------------------------------------------------------------------------

@pytest.mark.sigint
def test_status_watch_piped_prints_every_interval_and_ctrl_c_is_130(served, tmp_path):
    # Before: "No such option: --watch", exit 2.
    url, _ = served
    proc = subprocess.Popen(FLEET + ["status", "--watch", "--interval", "0.2", "--db", url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    try:
        seen = 0
        while seen < 2:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            seen += line.startswith("-- status at ")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
        assert proc.stderr.read().strip().splitlines()[-1] == "fleet: interrupted"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.sigint
def test_status_watch_on_a_terminal_redraws_in_place(served):
    import pty

    url, _ = served
    pid, fd = pty.fork()
    if pid == 0:  # the child: fleet on the pty's far side, Ctrl-C as at a terminal
        sigint_default()
        os.environ["COLUMNS"], os.environ["LINES"] = "120", "60"
        try:
            os.execv(FLEET[0], FLEET + ["status", "--watch", "--interval", "0.2", "--db", url])
        finally:
            os._exit(127)  # never back into the test runner's copy
    try:
        out = read_pty(fd, 60, "second status", until=lambda o: o.count(b"status at ") >= 2)
        os.kill(pid, signal.SIGINT)
        rest = read_pty(fd, 60, "exit after the Ctrl-C")
    except AssertionError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    assert out.count(b"status at ") >= 2, out[-2000:]
    assert b"\x1b[" in out  # cursor moves: the second status is drawn over the first
    assert os.waitstatus_to_exitcode(status) == 130
    assert b"fleet: interrupted" in rest


def test_a_cold_start_run_set_line_says_every_card_not_inf():
    from fleet.cli.status import _run_set_line

    cold = _run_set_line(64, float("inf"), float("inf"), 150_000.0)
    assert "inf" not in cold and "every card" in cold and "150,000" in cold
    sized = _run_set_line(12, 40_000.0, 40_800.0, 45_000.0)
    assert sized == "run set: 12 cards for 40,000 tok/s demand (target 40,800, scored capacity 45,000)"


def test_serve_under_a_promise_ends_with_its_goodput(tmp_path):
    """The exit line says what share of the delivered tokens kept the promise, as `status` does."""
    text = (ROOT / "presets/chat-latency.toml").read_text().replace("\nhours = 720\n", "\nhours = 48\n", 1)
    (tmp_path / "chat.toml").write_text(text)
    db = f"sqlite:///{tmp_path / 'c.db'}"
    done = fleet("serve", "--simulate", str(tmp_path / "chat.toml"), "--db", db, "--metrics-port", "0",
                 "--speed", "1e7", "--exit-when-done")
    assert done.returncode == 0, done.stderr[-2000:]
    share = json.loads(fleet("status", "--db", db, "--json").stdout)["goodput_share"]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("fleet serve: stopped; 48 hours")
    assert last.endswith(f", {share:.1%} of delivered tokens within the promise"), last
