"""What a test that signals a child or reads its terminal needs, so the suite behaves the same started at a
terminal or in the background (`nohup python -m pytest &`, a CI script), where SIGINT arrives ignored.

An ignored signal stays ignored through fork and exec, so a child started from such a suite ignores the Ctrl-C a
test sends it; each child the suite signals restores SIGINT's default first (`preexec_fn=sigint_default`). And a
read of a pty blocks for as long as the child is silent, so a test reads one through `read_pty`, with a deadline of
its own and a message naming what it waited for.
"""

from __future__ import annotations

import os
import select
import signal
import time
from typing import Callable

SIGINT_MARK = "sigint"
"""The marker of a test that sends SIGINT to a child: `tests/test_sigint_ignored.py` runs them all with SIGINT
ignored, as a background start does."""


def sigint_default() -> None:
    """In the child, before exec: SIGINT's default, as at a terminal (a Python child then raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def read_pty(fd: int, deadline_s: float, what: str, until: Callable[[bytes], bool] | None = None,
             so_far: bytes = b"") -> bytes:
    """Read the pty `fd` until `until(output)` holds, or, without `until`, until the child closes the terminal;
    fail naming `what` if neither happens within `deadline_s` (a guard against a hang, not a measurement)."""
    out = so_far
    end = time.monotonic() + deadline_s
    while not (until and until(out)):
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {what} on the terminal within {deadline_s:.0f} s; its last output: "
                                 f"{out[-600:].decode(errors='replace')!r}")
        if not select.select([fd], [], [], min(left, 1.0))[0]:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: every process on the far side closed the terminal
            chunk = b""
        if not chunk:
            if until:
                raise AssertionError(f"the terminal closed before {what}; its last output: "
                                     f"{out[-600:].decode(errors='replace')!r}")
            return out
        out += chunk
    return out
