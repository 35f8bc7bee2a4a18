"""Every test that sends SIGINT to a child is marked `sigint`, so it runs with SIGINT ignored as a background start
gives it (`tests/conftest.py`) and a child that inherits the ignore fails it instead of hanging the suite."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _marked(fn: ast.FunctionDef) -> bool:
    return any(ast.unparse(d) == "pytest.mark.sigint" for d in fn.decorator_list)


def _sends_sigint(fn: ast.FunctionDef) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "SIGINT" for n in ast.walk(fn))


def unmarked_sigint_tests(root: Path) -> list[str]:
    """`path::test` of each test function under `root` that names SIGINT without the `sigint` mark."""
    found = []
    for path in sorted(root.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and _sends_sigint(node) \
                    and not _marked(node):
                found.append(f"{path.relative_to(root)}::{node.name}")
    return found


def test_every_test_that_sends_sigint_is_marked():
    assert unmarked_sigint_tests(TESTS) == []


def test_an_unmarked_sigint_test_is_found(tmp_path):
    (tmp_path / "test_planted.py").write_text(
        "import os, signal, pytest\n\n"
        "def test_unmarked(pid):\n    os.kill(pid, signal.SIGINT)\n\n"
        "@pytest.mark.sigint\ndef test_marked(pid):\n    os.kill(pid, signal.SIGINT)\n\n"
        "def test_other(pid):\n    os.kill(pid, signal.SIGTERM)\n")
    assert unmarked_sigint_tests(tmp_path) == ["test_planted.py::test_unmarked"]
