"""The documentation's runnable command examples, and how their shown output is checked against the real one.

The convention (written once, here, and in docs/development.md): a fenced block opened with ```console is a
terminal session. Each line starting `$ fleet ` is a command (a line ending in `\\` goes on on the next, as a
reader copies it); the lines after it, up to the next `$ ` line, are what it prints. A command may end in `# exit
status N` when it is meant to fail (0 otherwise). The commands of one block run in order in one fresh folder, so a
later command may read what an earlier one wrote. Every other fenced block (```bash, ```text, ```toml, ...) is
shown, never run: that is where the examples too slow for the test suite go (200-month sweeps, benchmarks, serving
a pool).

A shown line matches a real line when the two are equal after collapsing runs of blanks; `...` in a shown line
stands for any text, so an example may elide the tail of a long line. The shown lines must appear in the real
output in the order shown (stdout, then stderr), though real lines may be left out of the example: a shown figure
that the code no longer prints matches no line and fails the test.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXIT_STATUS = re.compile(r"#\s*exit status (\d+)\s*$")


@dataclass(frozen=True)
class Example:
    """One command of a console block and what the page shows it printing."""

    argv: tuple[str, ...]  # the command's words after `fleet`
    shown: tuple[str, ...]  # the shown output's lines, blank lines at either end left out
    exit_status: int
    line: int  # the command's line in its page, from 1


@dataclass(frozen=True)
class Session:
    """One ```console block: its commands run in order in one folder."""

    page: str  # the page's path from the checkout's root
    line: int  # the block's opening fence, from 1
    examples: tuple[Example, ...]

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """Every page a reader sees: the README and the documentation site's pages."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def fenced_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """Every fenced block of a page: its language (may be empty), its opening fence's line (from 1), its lines."""
    found: list[tuple[str, int, list[str]]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)(`{3,}|~{3,})\s*(\S*)", lines[i])
        if not fence:
            i += 1
            continue
        indent, marks, lang = fence.group(1), fence.group(2), fence.group(3)
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(marks):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        found.append((lang, start + 1, body))
    return found


def sessions_in(text: str, page: str) -> list[Session]:
    """The console blocks of one page's markdown."""
    return [Session(page, line, tuple(_examples(body, line + 1, page)))
            for lang, line, body in fenced_blocks(text) if lang == "console"]


def _examples(body: list[str], first_line: int, page: str) -> list[Example]:
    examples: list[Example] = []
    command: tuple[str, int] | None = None
    shown: list[str] = []

    def close() -> None:
        if command is None:
            return
        text, line = command
        status = EXIT_STATUS.search(text)
        words = shlex.split(text, comments=True)
        if not words or words[0] != "fleet":
            raise ValueError(f"{page}:{line}: a console example runs fleet only, got {text!r}")
        while shown and not shown[-1].strip():
            shown.pop()
        while shown and not shown[0].strip():
            shown.pop(0)
        examples.append(Example(tuple(words[1:]), tuple(shown), int(status.group(1)) if status else 0, line))

    continued = False  # the command line before ended in a backslash: this line goes on with it
    for offset, raw in enumerate(body):
        if continued and command is not None:
            command = (command[0].rstrip()[:-1].rstrip() + " " + raw.strip().removeprefix("> ").strip(), command[1])
        elif raw.startswith("$ "):
            close()
            command, shown = (raw[2:], first_line + offset), []
        elif command is None:
            if raw.strip():
                raise ValueError(f"{page}:{first_line + offset}: a console block starts with a `$ fleet ...` line")
        else:
            shown.append(raw)
        continued = command is not None and not shown and command[0].rstrip().endswith("\\")
    close()
    if not examples:
        raise ValueError(f"{page}:{first_line - 1}: a console block with no `$ fleet ...` line")
    return examples


BLOCK_WIDTH = 88
"""The widest line of a terminal or shell block a page may show: what the site's column holds without a scroll bar.
A long command breaks with `\\` where a reader would break it; a long printed line is elided with `...`."""

SHELL_BLOCKS = ("console", "bash", "sh", "shell", "")


def wide_block_lines(text: str, page: str) -> list[str]:
    """`page:line: N characters` for each line of a terminal or shell block (or one that names no language) wider
    than `BLOCK_WIDTH`."""
    return [f"{page}:{line + 1 + i}: {len(raw)} characters" for lang, line, body in fenced_blocks(text)
            if lang in SHELL_BLOCKS for i, raw in enumerate(body) if len(raw) > BLOCK_WIDTH]


def all_sessions() -> list[Session]:
    return [s for p in pages() for s in sessions_in(p.read_text(), str(p.relative_to(ROOT)))]


def _normal(line: str) -> str:
    return " ".join(line.split())


def _line_pattern(shown: str) -> re.Pattern[str]:
    parts = [re.escape(part) for part in _normal(shown).split("...")]
    return re.compile(".*".join(parts))


def mismatch(shown: tuple[str, ...], real: str) -> str | None:
    """None when every shown line matches a real line, in order; else what the first unmatched line is."""
    real_lines = [_normal(line) for line in real.splitlines()]
    at = 0
    for line in shown:
        if not line.strip():
            continue
        pattern = _line_pattern(line)
        while at < len(real_lines) and not pattern.fullmatch(real_lines[at]):
            at += 1
        if at == len(real_lines):
            return f"shown line not printed (or not in this order): {line.strip()!r}"
        at += 1
    return None
