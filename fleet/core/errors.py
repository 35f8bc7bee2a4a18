"""The one error type of bad input: a preset, override, config or name that cannot be used.

It lives here, with no dependencies, so that every layer (the core, `policies`,
`storage`, the shell) can raise it without importing any other.
"""


class ConfigError(ValueError):
    """A preset, override or config that cannot be used; the message names it and why."""
