"""A store on a read-only file system: the commands that only read it open SQLite read-only and exit 0; a command
that writes says "read-only" in one line and exits 1 (a refused write, docs/exit-statuses.md).

The store's folder and file are made read-only, and the commands run where the permissions hold: as this user, or,
as root (whom permissions do not stop), with the capabilities that override them dropped (`setpriv`). The test
first checks that a write is refused there, so it cannot pass on a store that was writable after all.

Before: `fleet journal`, `status`, `explain`, `quarantine` and `db current` exited 2 with "attempt to write a
readonly database" (opening the store switched it to WAL and needed a `-shm` file beside it)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_status_before_the_bill import _decided_not_billed

ROOT = Path(__file__).resolve().parents[2]
WRITE_OVERRIDES = "-dac_override,-dac_read_search,-fowner"  # the capabilities that let root write anywhere


def _runner() -> list[str]:
    """The command prefix that runs a process the file permissions apply to."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("as root, permissions do not stop a write, and setpriv (util-linux) is not here to drop the override")
    return ["setpriv", f"--bounding-set={WRITE_OVERRIDES}"]


def _fleet(runner: list[str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*runner, sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture
def read_only_store(tmp_path):
    """(URL, folder, the runner) of a real pool's store, two hours decided, in a folder nobody may write."""
    folder = tmp_path / "ro"
    folder.mkdir()
    url = f"sqlite:///{folder / 's.db'}"
    _decided_not_billed(tmp_path, url).store.close()
    runner = _runner()
    (folder / "s.db").chmod(0o444)
    folder.chmod(0o555)
    try:
        probe = subprocess.run([*runner, sys.executable, "-c", f"open({str(folder / 'probe')!r}, 'w')"],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            pytest.skip("the folder made read-only can still be written here (a file system that ignores permissions)")
        yield url, folder, runner
    finally:
        folder.chmod(0o755)
        (folder / "s.db").chmod(0o644)


READERS = [["journal"], ["status"], ["explain", "gpu-a"], ["quarantine"], ["db", "current"], ["status", "--json"],
           ["journal", "--json"]]


@pytest.mark.parametrize("command", READERS, ids=[" ".join(c) for c in READERS])
def test_a_read_only_command_reads_a_store_it_cannot_write(read_only_store, command):
    url, folder, runner = read_only_store
    before = sorted(p.name for p in folder.iterdir())
    p = _fleet(runner, *command, "--db", url)
    assert (p.returncode, p.stderr) == (0, ""), p.stderr
    assert p.stdout.strip()
    assert sorted(p.name for p in folder.iterdir()) == before == ["s.db"]  # no -wal, no -shm, nothing else


WRITERS = [["card", "retire", "gpu-a", "--reason", "gone"], ["db", "prune", "--raw-older-than", "1"]]


@pytest.mark.parametrize("command", WRITERS, ids=[" ".join(c[:2]) for c in WRITERS])
def test_a_writing_command_says_read_only_in_one_line(read_only_store, command):
    url, folder, runner = read_only_store
    mode = stat.S_IMODE((folder / "s.db").stat().st_mode)
    p = _fleet(runner, *command, "--db", url)
    assert p.returncode == 1, p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith("fleet: error: ") and "read-only" in line, line
    assert stat.S_IMODE((folder / "s.db").stat().st_mode) == mode and sorted(q.name for q in folder.iterdir()) == ["s.db"]


@pytest.mark.parametrize("command", [["status"], ["explain", "gpu-a"], ["journal"], ["quarantine"]],
                         ids=["status", "explain", "journal", "quarantine"])
def test_the_readers_open_the_store_read_only(store_url, tmp_path, monkeypatch, capsys, command):
    """On either backend, the store a read-only command opens refuses a write: it cannot change what it reports on."""
    import storage
    from sqlalchemy.exc import DBAPIError

    from tests.service.test_service import run_cli

    _decided_not_billed(tmp_path, store_url).store.close()
    opened = []
    real_open = storage.open_store

    def open_store(url, **how):
        opened.append(real_open(url, **how))
        return opened[-1]

    monkeypatch.setattr(storage, "open_store", open_store)
    code, out, err = run_cli(capsys, *command, "--db", store_url)
    assert (code, err) == (0, "") and opened
    for store in opened:
        with pytest.raises(DBAPIError):
            store.reconcile.retire_card("gpu-a", 0, "a write through a reader's store", "test")
        store.close()
