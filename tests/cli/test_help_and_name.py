"""The distribution's own name, install hints right for a checkout, and help that reads at 80 columns (in a pty)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from fleet import DISTRIBUTION
from tests.cli.test_terminal_80x24 import cuts, in_terminal, lines_wider_than

ROOT = Path(__file__).resolve().parents[2]
FLEET = [sys.executable, "-m", "fleet.cli.app"]


def test_the_distribution_is_not_called_fleet_and_version_reads_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION == "fleet-autoscaler"  # `fleet` on PyPI is another project
    assert project["scripts"] == {"fleet": "fleet.cli.app:main"}
    p = subprocess.run([*FLEET, "--version"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == f"fleet {version(DISTRIBUTION)}"


def test_no_install_hint_names_the_other_fleet():
    texts = [*ROOT.glob("fleet/**/*.py"), *ROOT.glob("storage/**/*.py"), ROOT / "README.md", *ROOT.glob("docs/**/*.md"),
             ROOT / ".ci" / "run"]
    wrong = [f"{path.relative_to(ROOT)}: {m.group(0)}" for path in texts if path.is_file()
             for m in re.finditer(r"pip install [^\n`]*", path.read_text())
             if re.search(r"['\"]?fleet\[", m.group(0))]
    assert wrong == []


def test_compare_help_shows_the_extra_in_brackets():
    p = subprocess.run([*FLEET, "compare", "-h"], capture_output=True, text=True, timeout=120, env={"COLUMNS": "200",
                       **{k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}})
    assert p.returncode == 0, p.stderr
    assert "pip install -e '.[dask]'" in " ".join(p.stdout.split())


def _option_blocks(text: str) -> dict[str, list[str]]:
    """Each option's lines in a stacked help panel: its head line, then the lines of its text."""
    blocks: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        inner = line.strip("│ ").rstrip()
        m = re.match(r"│ (--[\w-]+)", line)
        if m:
            current = m.group(1)
            blocks[current] = []
        elif current and line.startswith("│     "):
            blocks[current].append(inner)
        elif not line.startswith("│"):
            current = None
    return blocks


def test_ingest_help_at_80_columns_gives_each_option_the_whole_width():
    rc, text = in_terminal("ingest", "-h")
    assert rc == 0, text[-800:]
    assert cuts(text) == [] and lines_wider_than(text, 80) == []
    blocks = _option_blocks(text)
    assert {"--db", "--plausible-factor", "--batch-size", "--bearer-token-file", "--prometheus"} <= set(blocks)
    assert "Records per transaction. [default: 100000]" in blocks["--batch-size"]
    assert "Prometheus base URL to pull a range query from." in blocks["--prometheus"]
    assert max(len(lines) for lines in blocks.values()) <= 3, blocks


def test_a_docstring_paragraph_is_wrapped_by_the_terminal_not_by_its_source_lines():
    rc, text = in_terminal("ingest", "-h")
    assert rc == 0
    assert "1 nothing stored because every record was quarantined" in " ".join(text.split())
    assert not any(ln.rstrip().endswith("every") for ln in text.splitlines())  # no source line break mid-sentence


COMMANDS = [[], ["replay"], ["compare"], ["ingest"], ["serve"], ["status"], ["explain"], ["plan"], ["journal"],
            ["quarantine"], ["classes"], ["db"], ["db", "prune"], ["db", "copy"], ["db", "upgrade"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "fleet")
def test_every_help_fits_80_columns_uncut(cmd):
    rc, text = in_terminal(*cmd, "-h")
    assert rc == 0, text[-800:]
    assert cuts(text) == [] and lines_wider_than(text, 80) == []
    blocks = _option_blocks(text)
    assert blocks and max(len(lines) for lines in blocks.values()) <= 4, blocks
