"""The command actuator: nothing an action starts outlives the action's call, or the service that made it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from fleet.service.actuators.command import STDERR_TAIL_BYTES, Command
from fleet.service.journal import ActuatorError
from storage.values import JournalRow
from tests.service.serving import wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; the parent-death signal is Linux's")

ROW = JournalRow(id=1, key="100:evict:a", ts=100, kind="evict", card_key="a", reason="slow", detail={}, acted_ts=None)

# A program that starts two grandchildren, says "started" with its own pid and theirs, waits for the second and
# would then say "ended". The sleeps hold none of the service's pipes, so a build that leaves them running fails
# these tests at once instead of hanging on the pipes.
SLEEPER = textwrap.dedent(
    """\
    #!/bin/sh
    sleep 600 </dev/null >/dev/null 2>&1 &
    other=$!
    sleep 600 </dev/null >/dev/null 2>&1 &
    echo "$$ $other $!" > "$1/started.tmp" && mv "$1/started.tmp" "$1/started"
    wait $!
    echo ended > "$1/ended"
    """
)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of a live process, None once it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None if fields[0] in "ZX" else (fields[0], int(fields[2]))


def _group_members(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) and st[1] == pgid:
            found.append(int(entry.name))
    return found


def _started(work: Path) -> tuple[list[int], int]:
    """(the shell's pid and its grandchildren's, their process group), read while they are alive."""
    pids = [int(p) for p in wait_for(lambda: (work / "started").exists() and (work / "started").read_text(),
                                     60, "the action to start").split()]
    st = _stat(pids[0])
    assert st is not None, "the action died before it could be looked at"
    return pids, st[1]


def _all_dead(pids: list[int]) -> bool:
    return all(_stat(pid) is None for pid in pids)


def _kill_leftovers(pgid: int, *pids: int) -> None:
    """Clean up after a failing run (on a build where the group outlives the action)."""
    members = _group_members(pgid) if pgid != os.getpgid(0) else []  # never this test's own group
    for pid in members + list(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def sleeper(tmp_path) -> list[str]:
    (tmp_path / "sleeper.sh").write_text(SLEEPER)
    return ["/bin/sh", str(tmp_path / "sleeper.sh"), str(tmp_path)]


def test_a_timed_out_action_takes_its_whole_process_group_with_it(tmp_path, sleeper):
    # 5 s is only how long the shell has to start its grandchild; nothing below depends on how long anything takes.
    with pytest.raises(ActuatorError) as err:
        Command(sleeper, timeout_s=5).act(ROW)
    pids = [int(p) for p in (tmp_path / "started").read_text().split()]
    try:
        wait_for(lambda: _all_dead(pids), 30, "the shell and its grandchildren to die")
    finally:
        _kill_leftovers(-1, *pids)
    assert not (tmp_path / "ended").exists()
    assert "still running after 5 s, its process group was killed" in str(err.value)


def test_close_kills_running_actions_and_starts_no_more(tmp_path, sleeper):
    command = Command(sleeper, timeout_s=600)
    errors: list[Exception] = []

    def run() -> None:
        try:
            command.act(ROW)
        except ActuatorError as err:
            errors.append(err)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    pids, pgid = _started(tmp_path)
    try:
        command.close()
        worker.join(60)
        assert not worker.is_alive()
        wait_for(lambda: _all_dead(pids) and not _group_members(pgid), 30, "the action's process group to be empty")
    finally:
        _kill_leftovers(pgid, *pids)
    assert len(errors) == 1 and "the service is stopping" in str(errors[0])
    with pytest.raises(ActuatorError, match="not started, the service is stopping"):
        command.act(ROW)


def test_an_action_that_exits_leaves_nothing_running(tmp_path):
    script = tmp_path / "background.sh"
    script.write_text('sleep 600 </dev/null >/dev/null 2>&1 &\necho "$!" > "$1/bg"\n')
    Command(["/bin/sh", str(script), str(tmp_path)]).act(ROW)
    background = int((tmp_path / "bg").read_text())
    try:
        wait_for(lambda: _stat(background) is None, 30, "the action's background process to die")
    finally:
        _kill_leftovers(-1, background)


DRIVER = textwrap.dedent(
    """\
    import json, sys
    from concurrent.futures import ThreadPoolExecutor
    from fleet.service.actuators import Command
    from storage.values import JournalRow

    row = JournalRow(**json.loads(sys.argv[1]))
    with ThreadPoolExecutor(1) as pool:  # the service acts from a scheduler worker thread
        pool.submit(Command(sys.argv[2:], timeout_s=600).act, row, 3).result()
    """
)


def test_a_killed_service_takes_its_running_action_with_it(tmp_path, sleeper):
    row = {"id": 1, "key": "100:evict:a", "ts": 100, "kind": "evict", "card_key": "a", "reason": "", "detail": {},
           "acted_ts": None}
    with open(tmp_path / "driver.stderr", "wb") as stderr:
        driver = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(row), *sleeper],
                                  cwd=Path(__file__).resolve().parents[2], stderr=stderr)
    pids, pgid = [], -1
    try:
        pids, pgid = _started(tmp_path)
        driver_pgid = os.getpgid(driver.pid)
        os.kill(driver.pid, signal.SIGKILL)  # the driver only: its action must go by itself
        assert driver.wait(60) == -signal.SIGKILL
        wait_for(lambda: _all_dead(pids) and not _group_members(pgid), 30,
                 "the action's process group to die with the service")
        assert pgid not in (os.getpgid(0), driver_pgid)  # it was a group of its own
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        _kill_leftovers(pgid, *pids)
    assert not (tmp_path / "ended").exists()


def test_the_service_dying_before_the_action_is_armed_ends_it(tmp_path):
    """The supervisor checks its parent after arming the signal: a service gone by then is not waited for."""
    from fleet.service.actuators import command

    marker = tmp_path / "ran"
    # Started as the service would, but naming a parent that is not this process: as if the service had died.
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", command._SUPERVISOR, "1", "/bin/sh", "-c",
                             f"touch {marker}"], start_new_session=True)
    assert proc.wait(60) == -signal.SIGKILL
    assert not marker.exists()


def test_a_failed_action_names_its_exit_and_the_end_of_its_stderr(tmp_path):
    noisy = [sys.executable, "-c", "import sys; sys.stderr.write('x' * 1_000_000 + ' the reason'); sys.exit(3)"]
    with pytest.raises(ActuatorError) as err:
        Command(noisy).act(ROW)
    text = str(err.value)
    assert "exited 3" in text and text.endswith("the reason") and len(text) < STDERR_TAIL_BYTES + 200
    with pytest.raises(ActuatorError, match="killed by SIGTERM"):
        Command(["/bin/sh", "-c", "kill -TERM $$"]).act(ROW)
    with pytest.raises(ActuatorError, match=r"'/nonexistent/act': not found or not executable"):
        Command(["/nonexistent/act"]).act(ROW)


def test_the_action_gets_the_decision_and_its_epoch(tmp_path):
    out = tmp_path / "got"
    Command(["/bin/sh", "-c", f'{{ echo "$FLEET_LEASE_EPOCH $FLEET_DECISION_KEY"; cat; }} > {out}']).act(ROW, 7)
    first, payload = out.read_text().split("\n", 1)
    assert first == "7 100:evict:a"
    assert '"epoch": 7' in payload and '"key": "100:evict:a"' in payload
