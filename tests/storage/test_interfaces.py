"""The store's boundary: `storage` depends on nothing of `fleet` but the pure core."""

from __future__ import annotations

import ast
from pathlib import Path

STORAGE = Path(__file__).resolve().parents[2] / "storage"


def _fleet_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n == "fleet" or n.startswith("fleet.")}


def test_storage_imports_only_the_core_of_fleet():
    wrong = {
        f"{path.name}: {name}"
        for path in sorted(STORAGE.glob("*.py"))
        for name in _fleet_imports(path)
        if name != "fleet.core" and not name.startswith("fleet.core.")
    }
    assert wrong == set()
    assert _fleet_imports(STORAGE / "db.py") == {"fleet.core.errors"}  # ConfigError from its dependency-free home
