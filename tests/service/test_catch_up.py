"""A real pool's service that starts behind the clock says how many hours it will decide too late to act on."""

from __future__ import annotations

from fleet.service.calendar import HOUR_S
from storage import open_store
from tests.fake_prometheus import StepClock
from tests.service.real_pool import FLAGSHIP_DAY, T0

CONFIG = FLAGSHIP_DAY + """\
[actuator]
expire_after_s = 7200
"""


def _service(tmp_path, now_ts: float):
    from fleet.service.config import load_service_config
    from fleet.service.service import Service

    (tmp_path / "fleet.toml").write_text(CONFIG)
    return Service(load_service_config(tmp_path / "fleet.toml"), open_store(f"sqlite:///{tmp_path / 'p.db'}", create=True),
                   StepClock(now_ts))


def test_a_store_far_behind_is_said_at_start(tmp_path):
    line = _service(tmp_path, T0 + 10 * HOUR_S + 60).catch_up_line()
    # hours 0-9 ended and none decided; 0-7 ended more than two hours before 10:01 (hour 7 at 08:00)
    assert line == ("10 hours ended and not decided: they are decided in turn, and the actions of the 8 that ended "
                    "more than [actuator] expire_after_s (7200 s) ago are journaled as expired, not carried out")


def test_a_store_that_kept_up_says_nothing(tmp_path):
    assert _service(tmp_path, T0 + 2 * HOUR_S + 60).catch_up_line() is None  # two hours behind, none too late
