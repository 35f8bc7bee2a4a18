"""Each command rendered in a real 80×24 terminal (a pty with its window size set): no figure and no column header is
cut to `conve…` or `(76.0…`, and every figure the JSON output gives appears whole."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios

import pytest

from fleet.cli.compare_view import FIGURE_HEADERS, _fig
from tests.service.serving import TINY_PRESET
from tests.signals import read_pty

FLEET = [sys.executable, "-m", "fleet.cli.app"]
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[=>]")
# Rich's cut: an ellipsis right after a letter, a digit or a figure's punctuation.
CUT = re.compile(r"[\w%().,$–-]…")


def in_terminal(*args: str, rows: int = 24, cols: int = 80) -> tuple[int, str]:
    """Run `fleet ARGS` on a pty of rows × cols with TERM=xterm; its exit status and its output, ANSI stripped."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")} | {"TERM": "xterm"}
    p = subprocess.Popen([*FLEET, *args], stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    try:
        out = read_pty(master, 600, "end of the command's output")
    except AssertionError:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)
        raise
    finally:
        os.close(master)
    rc = p.wait(timeout=60)
    return rc, ANSI.sub("", out.decode(errors="replace")).replace("\r", "")


def cuts(text: str) -> list[str]:
    return [text[max(0, m.start() - 12): m.end()] for m in CUT.finditer(text)]


def lines_wider_than(text: str, cols: int) -> list[str]:
    return [ln for ln in text.splitlines() if len(ln.rstrip()) > cols]


def test_compare_fits_80_columns_and_shows_every_figure_whole():
    args = ["compare", "-p", "noise-evictor", "--months", "3", "--jobs", "1"]
    rc, text = in_terminal(*args)
    assert rc == 0, text[-800:]
    assert cuts(text) == []
    table = text[text.index("noise-evictor: 1 combinations × 3 months (seeds"):]  # after the progress bar
    assert lines_wider_than(table, 80) == []
    got = subprocess.run([*FLEET, *args, "--json"], capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr
    for row in json.loads(got.stdout):
        for key, header in FIGURE_HEADERS.items():
            figure = _fig(key, row[key])
            assert f"{header} {figure}" in table or figure in table, (header, figure)
        for check in ("capacity", "convergence", "eviction"):
            assert f"{row['pass_rate'][check]:.1%}" in table


def test_compare_grid_of_two_fits_80_columns():
    rc, text = in_terminal("compare", "-p", "noise-evictor", "--months", "3", "--jobs", "1", "--share", "0.2,0.4")
    assert rc == 0, text[-800:]
    assert cuts(text) == []
    assert "share 0.2" in text and "share 0.4" in text  # each stacked row names its choice


def test_replay_all_fits_80_columns():
    rc, text = in_terminal("replay", "--all")
    assert rc == 0, text[-800:]
    assert cuts(text) == []
    assert lines_wider_than(text, 80) == []
    assert [ln for ln in text.splitlines() if ln != ln.rstrip()] == []


def test_replay_all_cuts_no_figure():
    rc, text = in_terminal("replay", "--all")
    assert rc == 0, text[-800:]
    assert cuts(text) == []
    for figure in ("$28,840", "$35,291", "90,000 tok/s"):  # bargain-shortfall's bills and demand, as docs/presets.md quotes
        assert figure in text


def test_help_cuts_no_option_name():
    rc, text = in_terminal("--help")
    assert rc == 0, text[-800:]
    assert cuts(text) == []
    assert "compare" in text and "replay" in text


@pytest.fixture(scope="module")
def served_url(tmp_path_factory):
    """The tiny preset's month served in process on a simulated clock: a small store with cards and decisions."""
    from fleet.presets import load_preset
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, Simulation, simulation_config
    from storage.repository import open_repository

    d = tmp_path_factory.mktemp("served80")
    (d / "tiny.toml").write_text(TINY_PRESET)
    scenario = load_preset(str(d / "tiny.toml")).resolve()
    cfg = simulation_config(load_service_config(None), scenario)
    svc = Service(cfg, open_repository(f"sqlite:///{d / 'served.db'}"), SimClock(cfg.month.start_ts, 1e9),
                  simulation=Simulation.of(scenario, cfg.month.start_ts))
    for _ in range(5):
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
    svc.telemetry.engine.dispose()
    return f"sqlite:///{d / 'served.db'}"


def test_status_cuts_no_figure(served_url):
    rc, text = in_terminal("status", "--db", served_url)
    assert rc == 0, text[-800:]
    assert cuts(text) == []
    assert re.search(r"convergence \d+\.\d%", text)


def test_status_lines_fit_80_columns(served_url):
    rc, text = in_terminal("status", "--db", served_url)
    assert rc == 0 and lines_wider_than(text, 80) == []
