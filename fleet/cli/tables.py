"""Tables that fit the terminal: a row of figures is shown whole or stacked, never cut to `conve…`.

Rich shrinks a table wider than the console by cutting its cells; a figure cut
in half reads as a different figure. So a table wider than the terminal is
stacked instead (one block per row, each figure beside its header, lines broken
only between figures), and piped output is printed at its natural width with no
hard wrap and no trailing spaces, for scripts and diffs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table


@dataclass
class Columns:
    """A table as plain data: headers, which columns are labels (left) and which figures (right), and the rows."""

    headers: list[str]
    figures: list[bool]
    rows: list[list[str]] = field(default_factory=list)

    def add_row(self, *cells: str) -> None:
        self.rows.append(list(cells))


def _rich_table(cols: Columns) -> Table:
    t = Table(box=None, padding=(0, 1), header_style="bold")
    for h, is_figure in zip(cols.headers, cols.figures):
        # no_wrap: a figure is one unbreakable word; the table is stacked instead when it does not fit.
        t.add_column(escape(h), justify="right" if is_figure else "left", no_wrap=is_figure)
    for r in cols.rows:
        t.add_row(*(escape(c) for c in r))
    return t


def natural_width(console: Console, cols: Columns) -> int:
    """Columns the table needs with no cell cut or wrapped."""
    wide = console.options.update(width=10_000)
    return Measurement.get(console, wide, _rich_table(cols)).maximum


def stacked_lines(cols: Columns, width: int, indent: str = "  ") -> list[str]:
    """Each row as a block: its labels on one line, then `header value` pairs, broken only between pairs."""
    lines: list[str] = []
    for r in cols.rows:
        labels = [f"{h} {c}" if h else c for h, c, f in zip(cols.headers, r, cols.figures) if not f and c]
        lines.append(" · ".join(labels) if labels else "-")
        line = ""
        for h, c, f in zip(cols.headers, r, cols.figures):
            if not f:
                continue
            pair = f"{h} {c}"
            if line and len(indent) + len(line) + 3 + len(pair) > width:
                lines.append(indent + line)
                line = ""
            line = f"{line}; {pair}" if line else pair
        if line:
            lines.append(indent + line)
    return lines


def print_table(console: Console, cols: Columns) -> None:
    """The table across when it fits the console (or the console is not a terminal), stacked when it does not."""
    if not console.is_terminal or natural_width(console, cols) <= console.width:
        console.print(_rich_table(cols))
        return
    for line in stacked_lines(cols, console.width):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def piped_text(text: str) -> str:
    """Captured output for a pipe: every line without its trailing spaces."""
    return "\n".join(line.rstrip() for line in text.splitlines()) + ("\n" if text else "")


def wide_console() -> Console:
    """A console for piped output: wide enough for any table, and text lines never hard-wrapped."""
    return Console(width=10_000, highlight=False, soft_wrap=True, color_system=None)
