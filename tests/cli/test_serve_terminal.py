"""`fleet serve --simulate` in a real terminal (a pty): a line as each simulated day is billed, and no line of the
migration tool's own logging at `--log-level info`."""

from __future__ import annotations

import re

from fleet.cli.serve import days_billed, progress_line
from tests.cli.test_terminal_80x24 import in_terminal
from tests.service.serving import TINY_PRESET


def test_progress_line_counts_days_and_hours():
    assert progress_line(24, 96) == "fleet serve: day 1 of 4 billed (hour 24 of 96)"
    assert progress_line(100, 100) == "fleet serve: day 5 of 5 billed (hour 100 of 100)"


def test_each_day_is_said_once_and_none_skipped():
    # Before: billed hour 25 printed "day 2", hour 48 "day 2" again, and "day 3" never came before the end.
    said = []
    for billed in (1, 25, 48, 50, 71, 73, 95, 96):
        line = progress_line(billed, 96)
        if days_billed(billed, 96) > (said[-1] if said else 0):
            said.append(int(re.search(r"day (\d+) of", line).group(1)))
    assert said == [1, 2, 3, 4]


def test_a_simulated_month_tells_its_days_and_not_alembics_setup(tmp_path):
    (tmp_path / "tiny.toml").write_text(TINY_PRESET)
    # 20 simulated hours a wall second: the tiny month's 96 hours take about five seconds, its days one each.
    rc, text = in_terminal("serve", "--simulate", str(tmp_path / "tiny.toml"), "--db", f"sqlite:///{tmp_path / 's.db'}",
                           "--metrics-port", "0", "--speed", "72000", "--exit-when-done", "--log-level", "info")
    assert rc == 0, text[-1500:]
    days = re.findall(r"fleet serve: day (\d) of 4 billed \(hour \d+ of 96\)", text)
    assert days and days == sorted(set(days)), text[-1500:]  # each day once, in order
    assert "alembic" not in text
    assert "fleet serve: stopped; 96 hours" in text
