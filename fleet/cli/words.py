"""The words and options the commands share: a percentage, a count with its noun, grouped numbers in a journaled
reason, a time as the commands print it, a database URL as it may be shown, and the `--db` option."""

from __future__ import annotations

import re
from typing import Annotated, Optional

import typer

from fleet.core.units import iso_minute  # noqa: F401 - the commands' time, written once for them and the log


def shown_url(url: str) -> str:
    """`storage.db.shown_url` (the URL, password masked), imported when first used: SQLAlchemy is not loaded at start."""
    from storage.db import shown_url as shown

    return shown(url)


DbOption = Annotated[Optional[str], typer.Option("--db", envvar="FLEET_DB", show_envvar=True,
                                                  help="Database URL (beats the config's storage url; FLEET_DB gives it too).")]


def percent(value: float | None, none: str = "n/a until the first billed hour") -> str:
    """A share as a percentage, or what stands for it while there is nothing to divide (no hour billed, or none
    with its demand measured: NaN, or None once made JSON-safe)."""
    return none if value is None or value != value else f"{value:.1%}"


def times(n: int, what: str = "time", plural: str | None = None) -> str:
    """`1 time`, `0 times`, `2 eviction passes`: a count with its noun in the number it takes."""
    return f"{n} {what}" if n == 1 else f"{n} {plural or what + 's'}"


_BARE_NUMBER = re.compile(r"(?<![\w.,:/\-])(\d{4,})(?![\w.,:/%\-])")


def grouped(text: str) -> str:
    """`text` with its bare whole numbers of four digits or more grouped by thousands (`2867` -> `2,867`), so a
    journaled reason reads in the same number format as the lines around it; times, ids and decimals are left."""
    return _BARE_NUMBER.sub(lambda m: f"{int(m.group(1)):,}", text)
