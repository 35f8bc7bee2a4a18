"""A write command refuses first and touches nothing: no store made for a typo, an unreachable source or a busy
port; and a SQLite URL whose folder is missing is one line naming the folder, for writers as for readers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.service.serving import TINY_PRESET

T0 = 1_735_689_600


def fleet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={k: v for k, v in os.environ.items() if k != "FLEET_DB"})


def _one_line(p: subprocess.CompletedProcess) -> str:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return lines[0]


def _telemetry(path: Path) -> Path:
    path.write_text("card_id,ts,tokens_per_s\n" + "".join(f"gpu-0,{T0 + 60 * k},6000\n" for k in range(3)))
    return path


def test_prune_of_a_mistyped_store_makes_none(tmp_path):
    p = fleet("db", "prune", "--raw-older-than", "7", "--db", "sqlite:///typo.db", cwd=tmp_path)
    assert p.returncode == 2
    assert _one_line(p) == "fleet: error: database 'sqlite:///typo.db': no such file; no store there (nothing was created)"
    assert list(tmp_path.iterdir()) == []


def test_copy_from_a_mistyped_store_leaves_no_file(tmp_path):
    p = fleet("db", "copy", "--from", "sqlite:///none.db", "--to", "sqlite:///out.db", cwd=tmp_path)
    assert p.returncode == 2
    assert _one_line(p) == "fleet: error: database 'sqlite:///none.db': no such file; nothing to copy (nothing was created)"
    assert list(tmp_path.iterdir()) == []


def test_a_pull_from_a_bad_url_makes_no_store(tmp_path):
    p = fleet("ingest", "--prometheus", "notaurl", cwd=tmp_path)
    assert p.returncode == 2
    assert _one_line(p).startswith("fleet: error: Prometheus URL 'notaurl'")
    assert list(tmp_path.iterdir()) == []


def test_a_pull_from_a_server_that_does_not_answer_makes_no_store(tmp_path):
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    p = fleet("ingest", "--prometheus", f"http://127.0.0.1:{port}", "--db", "sqlite:///s.db", cwd=tmp_path)
    assert p.returncode != 0
    assert "cannot reach the server" in _one_line(p)
    assert list(tmp_path.iterdir()) == []


def test_serve_on_a_busy_port_exits_1_and_makes_no_store(tmp_path):
    (tmp_path / "tiny.toml").write_text(TINY_PRESET)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        p = fleet("serve", "--simulate", "tiny.toml", "--db", "sqlite:///s.db", "--metrics-port", str(port),
                  "--exit-when-done", cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert _one_line(p) == f"fleet: error: metrics on 127.0.0.1:{port}: Address already in use; nothing was started"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["tiny.toml"]


def test_a_writer_names_a_missing_folder_of_a_sqlite_url(tmp_path):
    src = _telemetry(tmp_path / "t.csv")
    p = fleet("ingest", str(src), "--db", "sqlite:///nofolder/s.db", cwd=tmp_path)
    assert p.returncode == 2
    assert _one_line(p) == "fleet: error: database 'sqlite:///nofolder/s.db': no folder 'nofolder' to hold it (nothing was created)"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["t.csv"]


def test_ingest_of_a_folder_says_it_is_a_folder(tmp_path):
    (tmp_path / "drop").mkdir()
    p = fleet("ingest", "drop/", "--db", "sqlite:///s.db", cwd=tmp_path)
    assert p.returncode == 2
    assert _one_line(p) == "fleet: error: 'drop': is a folder, not a file (--watch drop --once takes every file in it)"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["drop"]
