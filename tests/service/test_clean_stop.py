"""A clean stop with an action hanging: `fleet serve` stops at once (not after the action's time-out), the action's
process group is killed, and its decision is not marked done; SIGTERM exits 0, Ctrl-C 130 with `fleet: interrupted`.

The stop is sent at a chosen point (the actuator has written that it is blocked), not at a chosen time; the only
bound on time is a generous one, far below the action's 600 s time-out it must not wait for.
"""

from __future__ import annotations

import os
import signal
import textwrap

import pytest

from storage.repository import open_repository
from storage.service_store import ServiceStore
from tests.service.serving import TINY_PRESET, Served, wait_for

# Blocks on the first eviction (its own pid written first, then exec: the sleep keeps that pid), logs the others.
ACTUATOR = textwrap.dedent(
    """\
    #!/bin/sh
    work="$1"
    if [ "$FLEET_DECISION_KIND" = evict ] && [ ! -e "$work/blocked" ]; then
        printf '%s %s' "$FLEET_DECISION_KEY" "$$" > "$work/blocked.tmp" && mv "$work/blocked.tmp" "$work/blocked"
        exec sleep 600
    fi
    echo "$FLEET_DECISION_KEY" >> "$work/acted.log"
    """
)
GENEROUS_S = 20  # far below the action's 600 s: what is checked is that the stop does not wait for it


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.sigint
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 0), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_stop_with_an_action_hanging_kills_it_and_marks_nothing(tmp_path, sig, status):
    (tmp_path / "tiny.toml").write_text(TINY_PRESET)
    (tmp_path / "actuator.sh").write_text(ACTUATOR)
    (tmp_path / "fleet.toml").write_text(
        f'[actuator]\nkind = "command"\n[actuator.command]\ntimeout_s = 600\n'
        f'command = ["/bin/sh", "{tmp_path / "actuator.sh"}", "{tmp_path}"]\n')
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    served = Served(["--config", str(tmp_path / "fleet.toml"), "--simulate", str(tmp_path / "tiny.toml"),
                     "--speed", "1e6", "--db", db, "--metrics-port", "0"], tmp_path)
    try:
        wait_for(lambda: (tmp_path / "blocked").exists(), 60, "the actuator to block on the first eviction")
        key, pid = (tmp_path / "blocked").read_text().split()
        assert _alive(int(pid))
        served.proc.send_signal(sig)
        assert served.proc.wait(GENEROUS_S) == status, served.stderr()
    finally:
        served.kill()
    assert not _alive(int(pid)), "the hanging action outlived the service"
    err = served.stderr()
    if sig == signal.SIGINT:
        assert err.rstrip().endswith("fleet: interrupted")
    assert "Traceback" not in err
    store = ServiceStore(open_repository(db).engine)
    (row,) = [r for r in store.decisions(kinds=["evict"]) if r.key == key]
    assert row.acted_ts is None  # not marked done: the next leader acts on it
    assert key in {r.key for r in store.unacted()}  # and not set aside either: the stop was no failure
    assert store.decisions(kinds=["act-failed", "act-expired"]) == []
    assert "released the store's lease" in err
