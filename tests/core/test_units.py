"""A duration setting in seconds: one parse for every such setting, and one line naming it when it is bad."""

import pytest

from fleet.core.errors import ConfigError
from fleet.core.units import seconds_setting


@pytest.mark.parametrize("raw, allow_zero, expected", [(None, True, 30.0), ("  ", True, 30.0), ("1.5", True, 1.5), ("0", True, 0.0)])
def test_good_values(raw, allow_zero, expected):
    assert seconds_setting("FLEET_X", raw, 30.0, what="the wait", allow_zero=allow_zero) == expected


@pytest.mark.parametrize("raw, allow_zero", [("abc", True), ("-1", True), ("nan", True), ("inf", True), ("0", False)])
def test_bad_values_name_the_setting(raw, allow_zero):
    with pytest.raises(ConfigError) as err:
        seconds_setting("FLEET_X", raw, 30.0, what="the wait", allow_zero=allow_zero)
    assert str(err.value).startswith(f"FLEET_X {raw!r}: expected the wait in seconds")
