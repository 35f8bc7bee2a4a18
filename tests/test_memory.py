"""`fleet.memory`: the process settings the `fleet` command makes before a month is loaded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fleet.memory import BLAS_THREAD_VARIABLES

SHOW = ("import os, sys; from fleet.memory import one_blas_thread; {before}"
        "print(one_blas_thread(), os.environ.get('OPENBLAS_NUM_THREADS'))")


def _run(before: str = "", **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    out = subprocess.run([sys.executable, "-c", SHOW.format(before=before)], env={**clean, **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_blas_runs_on_one_thread_by_default():
    assert _run() == "True 1"


@pytest.mark.parametrize("variable", BLAS_THREAD_VARIABLES)
def test_a_thread_count_the_user_set_stands(variable):
    assert _run(**{variable: "3"}) == ("False 3" if variable == "OPENBLAS_NUM_THREADS" else "False None")


def test_too_late_once_numpy_is_loaded():
    """OpenBLAS reads its thread count when numpy loads it: after that the setting would only mislead."""
    assert _run(before="import numpy; ") == "False None"


def test_starting_the_fleet_command_loads_no_numpy():
    """So the setting its entry point makes (`fleet.cli.app.main`) comes before numpy loads BLAS."""
    code = "import sys; import fleet.cli.app as a; print('numpy' in sys.modules)"
    clean = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    out = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
