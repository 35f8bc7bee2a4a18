"""Every ```console example of the README and the documentation site runs through the installed `fleet` command,
and prints what the page shows: no figure on a page drifts from the code (the convention: tests/docs/examples.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.examples import (BLOCK_WIDTH, ROOT, Example, Session, all_sessions, fenced_blocks, mismatch, pages,
                                 sessions_in, wide_block_lines)

SCRIPT = Path(sys.executable).parent / "fleet"  # the entry point `pip install -e .` writes, as a reader runs it
FLEET = [str(SCRIPT)] if SCRIPT.is_file() else [sys.executable, "-m", "fleet.cli.app"]
SESSIONS = all_sessions()


def run(example: Example, folder: Path) -> subprocess.CompletedProcess[str]:
    """The command as a reader types it in a fresh folder: the default store is that folder's, no colour, no width."""
    env = {k: v for k, v in os.environ.items() if k not in ("FLEET_DB", "COLUMNS", "LINES", "FORCE_COLOR")}
    env["NO_COLOR"] = "1"
    return subprocess.run([*FLEET, *example.argv], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)


def check(session: Session, folder: Path) -> list[str]:
    """What differs between the page and the code, one line per example; empty when the page is right."""
    faults = []
    for example in session.examples:
        p = run(example, folder)
        where = f"{session.page}:{example.line}: fleet {' '.join(example.argv)}"
        if p.returncode != example.exit_status:
            faults.append(f"{where}: exit status {p.returncode}, the page says {example.exit_status}\n{p.stderr}")
            continue
        wrong = mismatch(example.shown, p.stdout + p.stderr)
        if wrong:
            faults.append(f"{where}: {wrong}\n--- it printed:\n{p.stdout}{p.stderr}")
    return faults


def test_the_pages_have_examples_to_run():
    pages = {s.page for s in SESSIONS}
    assert "README.md" in pages  # the front page's verdict
    assert len(SESSIONS) >= 5, [s.name for s in SESSIONS]


@pytest.mark.parametrize("session", SESSIONS, ids=[s.name for s in SESSIONS])
def test_example_prints_what_the_page_shows(session: Session, tmp_path: Path):
    faults = check(session, tmp_path)
    assert faults == [], "\n\n".join(faults)


def test_a_drifted_figure_is_caught(tmp_path: Path):
    """The README's verdict with its bill a dollar off: the same check fails, naming the figure."""
    readme = (ROOT / "README.md").read_text()
    verdict = next(s for s in sessions_in(readme, "README.md") if s.examples[0].argv[:2] == ("replay", "-p"))
    shown = "\n".join(verdict.examples[0].shown)
    assert "$54,304" in shown
    drifted_text = readme.replace("$54,304 ", "$54,305 ", 1)
    drifted = next(s for s in sessions_in(drifted_text, "README.md") if s.line == verdict.line)
    faults = check(drifted, tmp_path)
    assert len(faults) == 1 and "$54,305" in faults[0]


def test_the_plan_shown_is_the_tiny_evictors_at_hour_48(tmp_path: Path):
    """The `fleet plan` output of the page on reading the service needs a store decided up to an hour and no further, which no fleet
    command leaves behind: the service is stepped there as tests/cli/test_plan.py steps it, then the page's text is
    checked as a console example's would be."""
    from tests.cli.test_plan import serve_until

    page = (ROOT / "docs" / "service-reading.md").read_text()
    (shown,) = [body for lang, _, body in fenced_blocks(page) if lang == "text" and body[0].startswith("plan for ")]
    svc, _, _ = serve_until(tmp_path, 48, ("ingest",))
    plan = Example(("plan", "--db", "sqlite:///served.db", "--simulate", "tiny.toml"), tuple(shown), 0, 0)
    p = run(plan, tmp_path)
    svc.telemetry.engine.dispose()
    assert p.returncode == 0, p.stderr
    wrong = mismatch(plan.shown, p.stdout + p.stderr)
    assert wrong is None, f"{wrong}\n--- it printed:\n{p.stdout}"


def test_the_matcher():
    real = "bill          $54,304          warm rent $49,462\n  evictions     12 of 32         4 wrong (33%)\n"
    assert mismatch(("bill $54,304 warm rent $49,462", "evictions 12 of 32 4 wrong (33%)"), real) is None
    assert mismatch(("bill $54,304 ...",), real) is None  # an elided tail
    assert mismatch(("evictions 12 of 32 4 wrong (33%)",), real) is None  # lines left out
    assert "27.8%" in mismatch(("bill $54,304 ...", "unmet 27.8%"), real + "  unmet 27.7%\n")  # a drifted figure
    assert mismatch(("evictions 12 of 32 ...", "bill $54,304 ..."), real) is not None  # out of order
    assert mismatch(("bill $54,30",), real) is not None  # a whole line, not a prefix


def test_a_console_block_runs_fleet_only():
    with pytest.raises(ValueError, match="runs fleet only"):
        sessions_in("```console\n$ rm -rf out/\n```\n", "page.md")
    with pytest.raises(ValueError, match="no `\\$ fleet"):
        sessions_in("```console\n```\n", "page.md")
    (s,) = sessions_in("```console\n$ fleet replay --seeds -3   # exit status 2\nfleet: error: x\n\n```\n", "p.md")
    assert s.examples[0].argv == ("replay", "--seeds", "-3") and s.examples[0].exit_status == 2
    assert s.examples[0].shown == ("fleet: error: x",) and s.examples[0].line == 2


def test_a_command_broken_with_a_backslash_runs_as_one():
    text = "```console\n$ fleet compare -p noise-evictor \\\n>     --months 10 --share 0.1 \\\n    --window day\nx\n```\n"
    (s,) = sessions_in(text, "p.md")
    (e,) = s.examples
    assert e.argv == ("compare", "-p", "noise-evictor", "--months", "10", "--share", "0.1", "--window", "day")
    assert e.shown == ("x",) and e.line == 2


def test_no_terminal_or_shell_line_is_wider_than_the_column():
    """Before: 60 lines of the README's and the site's terminal and shell blocks were wider than 88 characters, so
    the site cut them (even the Quick start's, `fleet repl…`) or scrolled them sideways."""
    wide = [w for p in pages() for w in wide_block_lines(p.read_text(), str(p.relative_to(ROOT)))]
    assert wide == []


def test_a_wide_line_is_found_in_a_shell_block_and_not_in_toml():
    long = "x" * (BLOCK_WIDTH + 1)
    text = f"```bash\nfleet ok\n{long}\n```\n\n```toml\n{long}\n```\n\n```\n{long}\n```\n"
    assert wide_block_lines(text, "p.md") == [f"p.md:3: {BLOCK_WIDTH + 1} characters",
                                              f"p.md:11: {BLOCK_WIDTH + 1} characters"]
