"""The real pool the service tests run beside: one flagship class, steady sizing on a two-hour window, a flat demand.
A test adds the tables it is about ([schedule], [ingest], [actuator], ...) to these."""

T0 = 1_767_225_600  # 2026-01-01T00:00Z, the month's start

FLAGSHIP_CLASS = """\
[[pool.classes]]
name = "flagship"
rated_tps = 6000
rent_usd_per_month = 2690
"""

FLAGSHIP_POOL = FLAGSHIP_CLASS + """\
[policy]
card_class = "flagship"
window = "2h"
mode = "steady"
[demand]
avg_tps = 10000
"""

DAY_MONTH = """\
[month]
start = 2026-01-01T00:00:00Z
hours = 24
"""

FLAGSHIP_DAY = DAY_MONTH + FLAGSHIP_POOL
"""A day-long month of the flagship pool."""
