"""How `--help` is drawn: help text as plain text (never Rich markup), and options stacked in a narrow terminal.

Typer parses every help string as Rich markup, so `pip install -e '.[dask]'` lost its `[dask]` as a style tag; help
here is text, and a bracket is a bracket. Typer draws options as a table of five columns, so at 80 columns each
option's text is squeezed into a column a quarter of the width, five lines an option: below `STACK_BELOW` columns an
option's names and type are one line and its text the lines under it, at the whole width.

Installed the first time help is drawn (the rendering module is imported then, not at every command's start).
"""

from __future__ import annotations

import inspect

STACK_BELOW = 120
"""Terminals narrower than this get stacked options."""
INDENT = 4


def install() -> None:
    """Patch typer's help rendering once: plain help text, stacked options in a narrow terminal."""
    from typer import rich_utils as ru

    if getattr(ru, "fleet_help_installed", False):
        return
    from rich.text import Text

    def make_text(*, text: str, style: str = "", markup_mode=None):
        return ru.highlighter(Text(_reflowed(inspect.cleandoc(text)), style=style))

    table_panel = ru._print_options_panel

    def print_options_panel(*, name, params, ctx, markup_mode, console):
        if console.width >= STACK_BELOW or not params:
            return table_panel(name=name, params=params, ctx=ctx, markup_mode=markup_mode, console=console)
        _stacked_panel(ru, name, params, ctx, markup_mode, console)

    ru._make_rich_text = make_text
    ru._print_options_panel = print_options_panel
    ru.fleet_help_installed = True


def _reflowed(text: str) -> str:
    """Each paragraph one line for the terminal to wrap (a docstring's own line breaks fall mid-line at 80 columns);
    a paragraph of list items or indented lines keeps its lines."""
    kept = []
    for para in text.split("\n\n"):
        lines = para.split("\n")
        if para.startswith("\b") or any(ln.startswith(("-", "*", " ")) for ln in lines[1:]):
            kept.append(para)
        else:
            kept.append(" ".join(ln.strip() for ln in lines))
    return "\n\n".join(kept)


def _stacked_panel(ru, name, params, ctx, markup_mode, console) -> None:
    from rich.console import Group
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.text import Text
    from typer.core import TyperArgument

    items = []
    for param in params:
        head = Text()
        if isinstance(param, TyperArgument):
            names = [param.display_name_raw + ("..." if param.metavar is None and param.nargs != 1 else "")]
        else:
            longs = [o for o in param.opts if o.startswith("--")]
            names = longs + [o for o in param.opts if not o.startswith("--")]
            if param.secondary_opts:
                names = [" / ".join([", ".join(names), ", ".join(param.secondary_opts)])]
        head.append(", ".join(names), style=ru.STYLE_OPTION)
        shown_type = param.display_type_rich(ctx=ctx)
        if shown_type:
            head.append(f" {shown_type}", style=ru.STYLE_TYPES)
        range_str = param._get_number_range_help_str()
        if range_str:
            head.append(" " + ru.RANGE_STRING.format(range_str), style=ru.STYLE_TYPES)
        items.append(head)
        items.append(Padding(ru._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode), (0, 0, 0, INDENT)))
    console.print(Panel(Group(*items), border_style=ru.STYLE_OPTIONS_PANEL_BORDER, title=name,
                        title_align=ru.ALIGN_OPTIONS_PANEL))


def hook() -> None:
    """Install the rendering above the first time any command's help is drawn."""
    from typer.core import TyperCommand, TyperGroup

    for cls in (TyperCommand, TyperGroup):
        if getattr(cls.format_help, "fleet_hooked", False):
            continue
        drawn = cls.format_help

        def format_help(self, ctx, formatter, _drawn=drawn):
            install()
            return _drawn(self, ctx, formatter)

        format_help.fleet_hooked = True
        cls.format_help = format_help
