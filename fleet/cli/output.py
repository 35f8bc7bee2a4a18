"""The command line's output: one console for stdout, one for stderr, and the usage error every command raises.

A module of its own below `fleet.cli.app`, so the commands that `app` registers read them without importing `app`
back (no cycle between the app and its commands).
"""

from __future__ import annotations

import re
import sys

from rich.console import Console

_TRAILING_SPACES = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$")  # spaces at a line's end, before any closing style codes


class _LineStdout:
    """stdout without trailing spaces (Rich pads table cells and soft-wrapped lines to the width), each line written
    when complete; what is left of a line goes out on flush, so progress bars and in-place redraws still show."""

    def __init__(self, tty: bool):
        self._line = ""
        self._tty = tty
        # A terminal's stream is held from the start: a progress bar or live display on this console redirects
        # sys.stdout into the console itself, so writing to sys.stdout then would loop.
        self._stream = sys.stdout if tty else None

    def _out(self):
        return self._stream or sys.stdout

    def write(self, text: str) -> int:
        lines = (self._line + text).split("\n")
        self._line = lines.pop()
        if lines:
            self._out().write("".join(_TRAILING_SPACES.sub(r"\1", line) + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        out = self._out()
        if self._line:
            out.write(self._line)
            self._line = ""
        out.flush()

    def isatty(self) -> bool:
        return self._tty

    def fileno(self) -> int:
        return self._out().fileno()


# A terminal gets the terminal's width; a pipe gets lines as long as they are (never hard-wrapped mid-phrase).
console = (Console(file=_LineStdout(tty=True)) if sys.stdout.isatty()
           else Console(file=_LineStdout(tty=False), width=10_000, soft_wrap=True))
err_console = Console(stderr=True)


class UsageError(Exception):
    """A bad input named by the message; exits with status 2 and no traceback."""
