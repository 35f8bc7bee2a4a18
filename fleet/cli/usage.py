"""A usage error of the option parser told as one line: `fleet: error: --seeds -3: should be 1 or more (…)`.

Click prints a usage error as a four-line block (usage, a hint, a blank line, `Error: …`) in the words of the
validator behind it ("Input should be greater than or equal to 1"); every other bad input here is one line naming
the input and the reason, and so is this one.
"""

from __future__ import annotations

import re
from typing import Sequence

from fleet.core.errors import reworded

__all__ = ["given_value", "reworded", "usage_line"]


def given_value(opts: Sequence[str], argv: Sequence[str]) -> str | None:
    """The value given on the command line to an option named by one of `opts` (the last one given), or None."""
    found = None
    for i, arg in enumerate(argv):
        for opt in opts:
            if arg == opt and i + 1 < len(argv):
                found = argv[i + 1]
            elif opt.startswith("--") and arg.startswith(opt + "="):
                found = arg[len(opt) + 1:]
    return found


def usage_line(err, argv: Sequence[str]) -> str:
    """The one line (without `fleet: error: `) of a click usage error raised parsing `argv`."""
    ctx = getattr(err, "ctx", None)
    path = ctx.command_path if ctx is not None and ctx.command_path else _command_path(argv)
    see = f" (see {path} -h)"
    param = getattr(err, "param", None)
    kinds = {cls.__name__ for cls in type(err).__mro__}
    if "MissingParameter" in kinds:
        what = getattr(err, "param_type", None) or getattr(param, "param_type_name", None) or "parameter"
        hint = " / ".join(param.opts) if param is not None and param.opts else ""
        return f"{path}: missing {what} {hint}{see}"
    if "BadParameter" in kinds and param is not None:
        opts = list(getattr(param, "opts", []))
        label = opts[0] if opts else (param.human_readable_name or param.name)
        value = given_value(opts, argv) if opts else None
        shown = f"{label} {value}" if value is not None else label
        return f"{shown}: {reworded(str(err.message))}{see}"
    if "NoArgsIsHelpError" in kinds:  # the help is printed above; click's own message is empty
        return f"{path}: no command given: name one of the commands above{see}"
    message = err.format_message() if hasattr(err, "format_message") else str(err)
    extra = re.match(r"Got unexpected extra argument(?:s|\(s\))? \((.*)\)$", message)
    if extra:
        return f"{path}: unexpected argument(s) {extra.group(1)}: give one at a time{see}"
    command = re.match(r"No such command '(.*)'\.?$", message)
    if command:
        where = "" if path == "fleet" else f"{path}: "
        return f"{where}no command {command.group(1)!r}{see}"
    return f"{path}: {reworded(message)}{see}"


def _command_path(argv: Sequence[str]) -> str:
    """`fleet` and the command words before the first option, when click gives no context."""
    words = ["fleet"]
    for arg in argv:
        if arg.startswith("-") or len(words) == 3:
            break
        words.append(arg)
    return " ".join(words[:2]) if len(words) > 1 and words[1] != "db" else " ".join(words)
