"""`fleet serve`'s own flags are blamed by name, not as the service config.

Before it: `fleet serve --metrics-port 99999` said "fleet: error: service config (defaults): metrics.port: …".
"""

from __future__ import annotations

import subprocess
import sys

import pytest


def fleet(*args, cwd):
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_a_metrics_port_out_of_range_names_the_option(tmp_path, port):
    p = fleet("serve", "--simulate", "tiny.toml", "--metrics-port", port, cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.strip() == f"fleet: error: --metrics-port {port}: a port is a whole number from 0 to 65535 (0 picks a free one)"
    assert list(tmp_path.iterdir()) == []  # nothing created: the flag is refused before the store is opened
