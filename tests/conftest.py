"""Shared factories for small scenarios and months, and the store backends the store tests run on (`tests/pg.py`)."""

from __future__ import annotations

import os
import signal

import pytest
from hypothesis import settings

# CI draws the same examples every run (HYPOTHESIS_PROFILE=ci), so a red run is reproducible.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

from fleet.core.scenario import Scenario

# The store backends (SQLite, and PostgreSQL when FLEET_TEST_PG_URL or --pg-url names a server).
from tests.pg import (  # noqa: E402,F401
    backend, new_repo, new_store_url, pg_module_databases, pg_server, pytest_addoption, pytest_report_header,
    pytest_terminal_summary, store_url,
)


@pytest.fixture(autouse=True)
def _sigint_ignored_where_a_child_is_signalled(request):
    """A test marked `sigint` runs with SIGINT ignored in this process, as `nohup python -m pytest &` or a CI script
    starts the suite: a child it signals must restore the default itself (`tests/signals.py`), so the test passes
    at a terminal and in the background alike, and fails wherever a child would inherit the ignore."""
    if request.node.get_closest_marker("sigint") is None:
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def make_scenario(**over) -> Scenario:
    """A small one-class scenario; keyword arguments replace top-level tables or fields."""
    raw = {
        "name": "tiny",
        "seed": 3,
        "hours": 72,
        "warmup_hours": 24,
        "classes": [{"name": "flagship", "rated_tps": 6000, "rent_usd_per_month": 2690, "pool_cards": 12}],
        "lottery": {"sigma": 0.2},
        "dips": {"start_prob_per_hour": 0.01, "hours": 4, "depth": 0.5},
        "demand": {"shape": "diurnal", "avg_tps": 30000, "peak_to_avg": 1.8},
        "policy": {"card_class": "flagship", "window": "day", "mode": "steady", "headroom": 1.05,
                   "eviction": {"rule": "below-median", "cadence_hours": 24, "share": 0.25,
                                "rules": {"below-median": {"fraction": 0.8}}}},
    }
    raw.update(over)
    return Scenario.model_validate(raw)


@pytest.fixture
def tiny() -> Scenario:
    return make_scenario()
