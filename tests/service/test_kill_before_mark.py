"""The leader SIGKILLed between acting and marking: actions did their work, their batch's mark was never written. The
next start offers those decisions again with the same keys (at most one batch of them), the receiver drops the
repeats, and nothing is lost or done twice.

The kill comes at a chosen point, not a chosen time: the actuator itself, at its 5th action, records the work as
done and then SIGKILLs the service that runs it (its supervisor's parent) before answering.
"""

from __future__ import annotations

import textwrap

from fleet.service.acting import ACT_BATCH_SIZE
from fleet.service.journal import ACTIONS
from storage.repository import open_repository
from storage.service_store import ServiceStore
from tests.service.serving import TINY_PRESET, Served

# A receiver as docs/acting.md asks for: it keeps the keys it carried out and answers a repeat with success.
ACTUATOR = textwrap.dedent(
    """\
    #!/bin/sh
    work="$1"
    echo "$FLEET_DECISION_KEY" >> "$work/offered.log"
    if grep -qxF "$FLEET_DECISION_KEY" "$work/done.log" 2>/dev/null; then
        exit 0  # a repeat: done already, not done again
    fi
    echo "$FLEET_DECISION_KEY" >> "$work/done.log"
    if [ "$(wc -l < "$work/done.log")" -eq 5 ] && mkdir "$work/killed" 2>/dev/null; then
        service=$(ps -o ppid= -p "$PPID" | tr -d ' ')
        echo "$FLEET_DECISION_KEY" > "$work/killed/key"
        kill -9 "$service"
        sleep 30  # the service's death takes this group with it
    fi
    """
)


def test_a_kill_between_acting_and_marking_repeats_one_offer_and_loses_nothing(tmp_path):
    (tmp_path / "tiny.toml").write_text(TINY_PRESET)
    (tmp_path / "actuator.sh").write_text(ACTUATOR)
    (tmp_path / "fleet.toml").write_text(
        f'[actuator]\nkind = "command"\ncommand = ["/bin/sh", "{tmp_path / "actuator.sh"}", "{tmp_path}"]\n')
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    args = ["--config", str(tmp_path / "fleet.toml"), "--simulate", str(tmp_path / "tiny.toml"), "--speed", "1e6",
            "--db", db, "--metrics-port", "0"]
    first = Served(args, tmp_path, "first")
    try:
        assert first.proc.wait(120) == -9, first.stderr()
    finally:
        first.kill()
    killed_key = (tmp_path / "killed" / "key").read_text().strip()
    store = ServiceStore(open_repository(db).engine)
    done_before = (tmp_path / "done.log").read_text().split()
    unmarked = {r.key for r in store.unacted()}
    assert killed_key in unmarked  # its work was done, its mark never written
    # What was done and not marked is the killed pass's batch: the actions before the kill in it, the kill's last.
    batch = [k for k in done_before if k in unmarked]
    assert batch[-1] == killed_key and 1 <= len(batch) <= ACT_BATCH_SIZE
    assert len(batch) > 1  # the kill landed inside a batch, after other actions of it

    second = Served(args + ["--exit-when-done"], tmp_path, "second")
    assert second.proc.wait(120) == 0, second.stderr()

    done = (tmp_path / "done.log").read_text().split()
    offered = (tmp_path / "offered.log").read_text().split()
    actions = [r for r in store.decisions() if r.kind in ACTIONS]
    assert sorted(done) == sorted(r.key for r in actions)  # each carried out once, none lost
    assert len(done) == len(set(done))  # the receiver carried out each decision once
    # Offered twice: exactly the killed batch, each with its key; nothing else repeated.
    assert sorted(k for k in set(offered) if offered.count(k) > 1) == sorted(batch)
    assert max(offered.count(k) for k in offered) == 2
    assert all(r.acted_ts is not None for r in actions)
    assert store.decisions(kinds=["act-failed", "act-expired"]) == []
