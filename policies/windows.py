"""Windows: how many trailing hours of telemetry a score averages.

Named windows are registered here; any whole number of hours is a window too,
written `36h` or `36`.
"""

from __future__ import annotations

import re

from fleet.core.errors import ConfigError
from fleet.core.registry import NoSettings, Plugin, Registry, constant

WINDOWS: Registry[int] = Registry("window")
"""Each named window with the hours it averages; a window has nothing to set."""
WINDOWS.register(Plugin("hour", NoSettings, constant(1)))
WINDOWS.register(Plugin("day", NoSettings, constant(24)))
WINDOWS.register(Plugin("week", NoSettings, constant(168)))


def window_hours(name: str) -> int:
    """Hours a window averages; `hour`, `day`, `week`, or `Nh`."""
    if name in WINDOWS:
        return WINDOWS.build(name, {}, "window")
    m = re.fullmatch(r"\s*(\d+)\s*h?\s*", str(name))
    if m and int(m.group(1)) >= 1:
        return int(m.group(1))
    raise ConfigError(f"unknown window {name!r} (known: {', '.join(WINDOWS.names())}, or a number of hours like 36h)")
