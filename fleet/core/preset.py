"""A preset: the scenario as written, its fix as a table of overrides, and `--set KEY=VALUE` overrides, as data.

An override's key is checked before the scenario is validated, so an override naming no key is one error naming
it; a plug-in's own table takes any key below it (its plug-in validates them), and old places of keys are still
settable (`fleet.core.old_keys`).
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel

from fleet.core.errors import ConfigError
from fleet.core.scenario import MarketClass, Scenario, build_scenario, deep_merge


class Preset:
    """A preset file: the scenario as written, and its fix as overrides."""

    def __init__(self, raw: dict, source: str, path: Path | None = None):
        raw = dict(raw)
        fix = raw.pop("fix", {})
        if not isinstance(fix, dict):
            raise ConfigError(f"{source}: [fix] must be a table")
        self.raw = raw
        self.fix_raw = fix
        self.source = source
        self.path = path
        self.scenario = build_scenario(raw, source)
        if fix:
            build_scenario(deep_merge(raw, fix), f"{source} [fix]")

    @property
    def name(self) -> str:
        return self.scenario.name

    @property
    def base_dir(self) -> Path | None:
        """The folder relative paths in the preset (a demand file) are read from."""
        return self.path.parent if self.path is not None else None

    def resolve(self, fix: bool = False, overrides: list[str] | None = None, seed: int | None = None) -> Scenario:
        """The scenario to replay: the preset or its fix, with overrides and seed applied."""
        if fix and not self.fix_raw:
            raise ConfigError(f"{self.source}: this preset has no [fix]")
        raw = deep_merge(self.raw, self.fix_raw) if fix else copy.deepcopy(self.raw)
        for a in overrides or []:
            raw = apply_override(raw, a)
        if seed is not None:
            raw["seed"] = seed
        return build_scenario(raw, self.source if not overrides else f"{self.source} with --set")


def parse_value(text: str) -> Any:
    """Read a `--set` value as a TOML value (number, bool, string, array), or a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(raw: dict, assignment: str) -> dict:
    """Apply one `KEY=VALUE` override (dotted key, e.g. `policy.eviction.share=0.1`) to a raw scenario dict."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment}: expected KEY=VALUE")
    key, _, text = assignment.partition("=")
    key = key.strip()
    path = key.split(".")
    if not key or any(not p for p in path):
        raise ConfigError(f"--set {assignment}: empty key")
    value = parse_value(text.strip())
    if path[0] == "classes":
        return _override_class(raw, path, value, assignment)
    node: Any = _template()
    for i, p in enumerate(path):
        if isinstance(node, _AnyKeys):  # a plug-in's: the key must name one of its keys, not its table
            node = None if len(path) - i >= node.depth else {}
            break
        if isinstance(node, dict) and p not in node and _OTHER_KEYS in node:
            node = node[_OTHER_KEYS]
            continue
        if not isinstance(node, dict) or p not in node:
            raise ConfigError(f"--set {assignment}: unknown key {key!r}")
        node = node[p]
    if isinstance(node, (dict, _AnyKeys)):
        raise ConfigError(f"--set {assignment}: {key!r} is a table, set one of its keys")
    out = copy.deepcopy(raw)
    cur = out
    for p in path[:-1]:
        cur = cur.setdefault(p, {})
    cur[path[-1]] = value
    return out


def _override_class(raw: dict, path: list[str], value: Any, assignment: str) -> dict:
    """`classes.NAME.KEY=VALUE` edits one card class of the market."""
    if len(path) != 3:
        raise ConfigError(f"--set {assignment}: expected classes.CLASS.KEY=VALUE")
    _, name, field = path
    if field not in MarketClass.model_fields:
        raise ConfigError(f"--set {assignment}: unknown key {field!r} for a card class")
    out = copy.deepcopy(raw)
    for c in out.get("classes", []):
        if c.get("name") == name:
            c[field] = value
            return out
    raise ConfigError(f"--set {assignment}: no card class named {name!r}")


_OTHER_KEYS = "\0other"


class _AnyKeys:
    """Plug-ins' own settings in the template: any key `depth` levels below is theirs to validate (1: a plug-in's
    table, `[policy.dip_aware]`; 2: a kind's tables by plug-in name, `[policy.scores.NAME]`)."""

    def __init__(self, depth: int):
        self.depth = depth


def _depth(annotation: Any) -> int:
    """How many levels of tables a `dict` field holds (0: not a dict)."""
    if get_origin(annotation) is not dict:
        return 0
    return 1 + _depth(get_args(annotation)[1])


def _template() -> dict:
    """Every settable key of a scenario, as a nested dict (values unused), old places of keys included."""

    def walk(model: type[BaseModel]) -> dict:
        out: dict = {}
        for name, f in model.model_fields.items():
            ann = f.annotation
            inner = [a for a in get_args(ann) if a is not type(None)]
            if len(inner) == 1 and isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
                ann = inner[0]  # an optional table (`[slo]`): its keys settable as the table's own
            if _depth(ann):
                out[name] = _AnyKeys(_depth(ann))
            else:
                out[name] = walk(ann) if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        for name, table in getattr(model, "old_keys", {}).items():
            out[name] = _AnyKeys(1) if table else None
        if getattr(model, "old_flat_keys", False):
            out[_OTHER_KEYS] = None  # any other key is an old plug-in key, moved to its table and validated there
        return out

    return walk(Scenario)
