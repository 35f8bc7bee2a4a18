"""The policy's plug-in settings where they used to be written, still read: each moved to its plug-in's own table.

Each plug-in's settings are a table of their own, under its kind and its name (`[policy.scores.dip-aware]`,
`[policy.forecasters.seasonal]`, `[policy.hystereses.release-after]`, `[policy.eviction.rules.below-median]`,
`[policy.eviction.admissions.limits]`). Before they were, they sat in shared tables: the dip-aware score's in
`[policy.dip_aware]`, the forecaster's in `[policy.forecaster]`, the hysteresis' `release_after_hours` in
`[policy]`, and the rule's and the admission's keys beside `rule` in `[policy.eviction]`. A policy written that way
still reads the same: each old key is moved to its new table before the policy is validated (on top of what that
table already holds, as a `--set` is), with one `MovedKey` warning naming where it is written now.
"""

from __future__ import annotations

import warnings
from typing import Any

from fleet.core.errors import MovedKey

OLD_POLICY_TABLES = {"dip_aware": ("scores", "dip-aware"), "forecaster": ("forecasters", None)}
"""An old table of `[policy]`: the kind's table it is now, and the plug-in's name (None: the one the policy chose)."""
OLD_POLICY_KEYS = {"release_after_hours": "hystereses"}
"""An old key of `[policy]`: the kind whose chosen plug-in's table holds it now."""
OLD_ADMISSION_KEYS = ("breaker_share", "disruption_share", "drain_hours")
"""The admission's old keys in `[policy.eviction]`; every other old key there was the rule's."""

CHOSEN = {"scores": "score", "forecasters": "forecast", "hystereses": "hysteresis", "rules": "rule",
          "admissions": "admission"}
"""The key naming the plug-in a kind's table is for."""


def tell(old: str, keys: list[str], new: str) -> None:
    """One line for keys read at an old place: where they are written now."""
    what = f"{old} is" if not keys else f"{', '.join(f'{old}.{k}' for k in keys)} {'is' if len(keys) == 1 else 'are'}"
    warnings.warn(MovedKey(f"{what} deprecated: write {'it' if not keys or len(keys) == 1 else 'them'} in {new}"),
                  stacklevel=2)


def _into(data: dict, kind: str, name: str, values: dict) -> bool:
    """Put `values` on top of the plug-in's table; False (nothing moved) when what is there is not a table, which
    the policy's validation then names."""
    tables = data.get(kind, {})
    if not isinstance(tables, dict) or not isinstance(tables.get(name, {}), dict):
        return False
    data[kind] = {**tables, name: {**tables.get(name, {}), **values}}
    return True


def policy_moved(data: Any, defaults: dict[str, str]) -> Any:
    """A raw `[policy]` table with its old keys moved to their plug-ins' tables (`defaults`: each choosing key's
    default, for a policy that leaves it out)."""
    if not isinstance(data, dict) or not (set(data) & (set(OLD_POLICY_TABLES) | set(OLD_POLICY_KEYS))):
        return data
    out = dict(data)
    for old, (kind, name) in OLD_POLICY_TABLES.items():
        if old in out and isinstance(out[old], dict):
            name = name or str(out.get(CHOSEN[kind], defaults[CHOSEN[kind]]))
            if _into(out, kind, name, out[old]):
                del out[old]
                tell(f"[policy.{old}]", [], f"[policy.{kind}.{name}]")
    for old, kind in OLD_POLICY_KEYS.items():
        if old in out:
            name = str(out.get(CHOSEN[kind], defaults[CHOSEN[kind]]))
            if _into(out, kind, name, {old: out[old]}):
                del out[old]
                tell("policy", [old], f"[policy.{kind}.{name}]")
    return out


def eviction_moved(data: Any, fields: set[str], defaults: dict[str, str]) -> Any:
    """A raw `[policy.eviction]` table with the rule's and the admission's keys that sat beside `rule` moved to
    their own tables (`fields`: the table's own keys; any other key was a plug-in's)."""
    if not isinstance(data, dict) or set(data) <= fields:
        return data
    out = {k: v for k, v in data.items() if k in fields}
    moved: dict[str, dict[str, Any]] = {"admissions": {}, "rules": {}}
    for key in data.keys() - fields:
        moved["admissions" if key in OLD_ADMISSION_KEYS else "rules"][key] = data[key]
    for kind, values in moved.items():
        if values:
            name = str(out.get(CHOSEN[kind], defaults[CHOSEN[kind]]))
            if _into(out, kind, name, values):
                tell("policy.eviction", sorted(values), f"[policy.eviction.{kind}.{name}]")
            else:
                out.update(values)  # left where they are: the table's validation names them
    return out
