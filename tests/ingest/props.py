"""One property, two tests: a few examples in every run, 100,000 under `pytest -m slow`.

`python -m pytest` (and CI) runs each property with `EXAMPLES` examples
(`FLEET_PROPERTY_EXAMPLES`, 100 by default); `python -m pytest -m slow` runs the
same properties with 100,000 each. The `slow` marker is registered in pyproject.toml,
and the default run deselects it. The loaded hypothesis profile (`HYPOTHESIS_PROFILE=ci`
derandomizes, see tests/conftest.py) applies to both.
"""

from __future__ import annotations

import os
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings

EXAMPLES = int(os.environ.get("FLEET_PROPERTY_EXAMPLES", "100"))
SLOW_EXAMPLES = 100_000


def fast_and_slow(body: Callable[..., None], /, **strategies) -> tuple[Callable, Callable]:
    """(the everyday test, the slow-marked 100,000-example test) of the property `body(**drawn)`."""

    def make(n: int, suffix: str) -> Callable:
        def test(**drawn) -> None:
            body(**drawn)

        test.__name__ = test.__qualname__ = f"{body.__name__.lstrip('_')}{suffix}"
        test.__doc__ = body.__doc__
        return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck))(given(**strategies)(test))

    slow = pytest.mark.timeout(4 * 3600)(pytest.mark.slow(make(SLOW_EXAMPLES, "_100k")))  # past the suite's 900 s a test
    return make(EXAMPLES, ""), slow
