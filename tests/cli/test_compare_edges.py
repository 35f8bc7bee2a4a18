"""`fleet compare`'s edges: output paths checked before any month runs, errors naming the option typed, Ctrl-C,
a plot of whatever the grid varies, counts as whole numbers, and piped tables without trailing spaces."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.cli.compare_view import _count, _fig
from fleet.core.compare import Combo
from fleet.report.plot import plot_axes
from tests.signals import read_pty, sigint_default

FLEET = [sys.executable, "-m", "fleet.cli.app"]
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[=>]")


def fleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FLEET, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "option, path, reason",
    [
        ("--plot", "/proc/x.png", "cannot be written"),
        ("--csv", "/proc/x.csv", "cannot be written"),
        ("--plot", "/no/such/folder/x.png", "does not exist"),
        ("--csv", "{tmp}/a-folder.csv", "is a folder"),
    ],
)
def test_an_unwritable_output_is_refused_before_any_month(tmp_path, option, path, reason):
    (tmp_path / "a-folder.csv").mkdir()
    path = path.format(tmp=tmp_path)
    # 100,000 months would run for hours: a refusal that came after the work would time the test out.
    r = fleet("compare", "-p", "noise-evictor", "--months", "100000", "--share", "0.2,0.4", option, path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fleet: error: {option} {path!r}: ") and reason in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_the_probe_leaves_no_file_behind_when_the_run_is_refused(tmp_path):
    out = tmp_path / "x.png"
    r = fleet("compare", "-p", "noise-evictor", "--class", "bargain", "--plot", str(out))
    assert r.returncode == 2 and not out.exists()


def test_an_unknown_class_names_the_class_option_and_what_was_typed():
    r = fleet("compare", "-p", "noise-evictor", "--class", "bargain")
    assert r.returncode == 2
    line = r.stderr.strip()
    assert line.startswith("fleet: error: --class 'bargain': ") and "with --set" not in line and "preset file" not in line


def test_the_plot_draws_an_axis_the_grid_varies_or_refuses():
    base = dict(window="hour", size_window="day", share=0.0, mode="held", headroom=1.0, card_class="flagship")
    grid = [Combo(**(base | {"mode": m, "card_class": c})) for m in ("held", "steady") for c in ("flagship", "bargain")]
    assert plot_axes(grid) == ("mode", None)  # not the eviction window, nor shares of 0%
    with pytest.raises(ValueError, match="--window"):
        plot_axes(grid[:1])


def test_a_plot_of_class_and_mode_is_drawn_along_them(tmp_path):
    out = tmp_path / "grid.svg"
    r = fleet("compare", "-p", "bargain-shortfall", "--months", "2", "--jobs", "1", "--mode", "held,steady",
              "--class", "any,bargain", "--plot", str(out))
    assert r.returncode == 0, r.stderr
    svg = out.read_text()
    assert "<!-- sizing mode -->" in svg  # the x axis's title (matplotlib writes each text as a comment)
    assert "<!-- eviction window (scores the rule judges) -->" not in svg and "<!-- eviction share -->" not in svg


def test_a_single_combination_plot_is_refused_before_the_months():
    r = fleet("compare", "-p", "noise-evictor", "--months", "100000", "--plot", "/tmp/never-written.png")
    assert r.returncode == 2 and "nothing to draw" in r.stderr and "--share" in r.stderr


def test_counts_are_whole_numbers():
    assert _fig("wrong_evictions", {"median": 4.0, "p05": 2.0, "p95": 5.15}) == "4 (2–5)"
    assert _fig("evictions", {"median": 4.5, "p05": 0.45, "p95": 1234.5}) == "5 (0–1,235)"
    assert _count(2.5) == "3"


def test_json_dollars_are_to_the_cent():
    r = fleet("compare", "-p", "noise-evictor", "--months", "2", "--jobs", "1", "--json")
    assert r.returncode == 0, r.stderr
    for row in json.loads(r.stdout):
        for key in ("bill_usd", "idle_usd"):
            for v in row[key].values():
                assert round(v, 2) == v


def test_piped_output_has_no_trailing_spaces_and_no_hard_wrap():
    r = fleet("compare", "-p", "noise-evictor", "--months", "2", "--jobs", "1", "--share", "0.2,0.4")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln for ln in lines if ln != ln.rstrip()] == []
    # The ideal's sentence and the pass marks are one line each, whatever their length.
    assert any(ln.startswith("  ideal: exact") and ln.endswith("months") for ln in lines)
    assert any(ln.startswith("  pass marks:") and "wrong evictions <= 0" in ln for ln in lines)


def _session_pids(sid: int) -> list[int]:
    """Processes still alive in the session the child led (its workers)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(d.name))
    return pids


@pytest.mark.sigint
@pytest.mark.parametrize("to_group", [True, False], ids=["terminal-ctrl-c", "parent-only"])
def test_ctrl_c_stops_the_workers_and_exits_130(to_group):
    """SIGINT once the progress bar shows the first month done (read from the child's terminal), not after a delay."""
    master, slave = pty.openpty()
    p = subprocess.Popen([*FLEET, "compare", "-p", "noise-evictor", "--months", "40", "--jobs", "2", "--share", "0.2,0.4"],
                         stdin=slave, stdout=slave, stderr=slave, start_new_session=True, preexec_fn=sigint_default,
                         env=dict(os.environ, TERM="xterm"))
    os.close(slave)
    try:
        first = read_pty(master, 300, "month done in the progress bar",
                         until=lambda o: bool(re.search(r" [1-9]\d*/40 ", ANSI.sub("", o.decode(errors="replace")))))
        (os.killpg if to_group else os.kill)(p.pid, signal.SIGINT)
        out = read_pty(master, 120, "exit after the Ctrl-C", so_far=first).decode(errors="replace")
        rc = p.wait(timeout=60)
    finally:
        os.close(master)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
    text = ANSI.sub("", out).replace("\r", "\n")
    assert rc == 130
    assert "fleet: interrupted" in text and "Traceback" not in text
    assert "combinations × 40 months (seeds" not in text  # no table after an interrupt
    for _ in range(100):  # the workers are reaped at exit; allow the kernel a moment to list them gone
        if not _session_pids(p.pid):
            break
        time.sleep(0.1)
    assert _session_pids(p.pid) == []
