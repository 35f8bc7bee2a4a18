"""The lines around compare's table say what is true of its rows: the header what every row shares, the headroom
note the rows it shows at the search's top."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from fleet.cli.compare_view import headroom_note
from fleet.core.compare import HEADROOM_SEARCH


def test_the_header_does_not_say_eviction_off_when_some_rows_evict():
    p = subprocess.run([sys.executable, "-m", "fleet.cli.app", "compare", "-p", "noise-evictor", "--share", "0,0.1",
                        "--months", "1", "--jobs", "1"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    header = next(ln for ln in p.stdout.splitlines() if ln.startswith("  every row: "))
    assert "eviction off" not in header
    assert header.startswith("  every row: hour eviction window, day sizing window, steady mode, headroom 1.01, flagship cards")


def test_the_headroom_note_counts_only_the_rows_shown_at_the_top():
    shown = [SimpleNamespace(combo=("a", 1.2)), SimpleNamespace(combo=("b", HEADROOM_SEARCH[1]))]
    dropped = [("c", HEADROOM_SEARCH[1]), ("d", HEADROOM_SEARCH[1]), ("e", HEADROOM_SEARCH[1])]
    note = headroom_note(shown, dropped, screened=5, min_pass=0.95)
    assert "rows reach it nowhere" not in note and "row reaches" not in note
    assert note.endswith("; 5 combinations dropped after the first 30 months (3 of them reach it nowhere there)")
    note = headroom_note(shown, [("b", HEADROOM_SEARCH[1]), *dropped], screened=5, min_pass=0.95)
    assert f"; 1 row reaches it nowhere and is shown at {HEADROOM_SEARCH[1]:g}; 5 combinations" in note
    assert headroom_note(shown, [], screened=0, min_pass=0.95).endswith(f"steps of {HEADROOM_SEARCH[2]:g})")
