"""The one error type of bad input: a preset, override, config or name that cannot be used, and the one masker
of the secrets a message might carry.

They live here, with no dependencies, so that every floor (the core, `policies`,
`storage`, the shell) can use them without importing any other.
"""

import re

# A password runs to the last `@` of its URL: one written with an `@`, `/`, `?` or `#` of its own, not escaped, is
# masked whole (and the host with it, when an `@` follows in the URL's path or query: better too much than a part).
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*:)[^\s'\"]*@")
_QUERY_PASSWORD = re.compile(r"([?&](?:password|passwd|pwd)=)[^&\s'\"]*", re.IGNORECASE)
_HTTP_USERINFO = re.compile(r"(\bhttps?://)[^\s:/@'\"]+@", re.IGNORECASE)


def hide_passwords(text: str) -> str:
    """`text` with the secret of every URL in it masked: a password (`scheme://user:***@host`), in an HTTP URL a
    userinfo with no password, which is a token (`https://***@host`), and a query's `password=`. Every message, log
    line and name that shows a database, Prometheus or webhook URL goes through here."""
    return _QUERY_PASSWORD.sub(r"\1***", _HTTP_USERINFO.sub(r"\1***@", _URL_PASSWORD.sub(r"\1***@", text)))


_REWORDED = (
    (re.compile(r"^Input should be greater than or equal to (\S+)$"), r"should be \1 or more"),
    (re.compile(r"^Input should be less than or equal to (\S+)$"), r"should be \1 or less"),
    (re.compile(r"^Input should be greater than (\S+)$"), r"should be more than \1"),
    (re.compile(r"^Input should be less than (\S+)$"), r"should be less than \1"),
    (re.compile(r"^Input should be a valid integer.*$"), "should be a whole number"),
    (re.compile(r"^Input should be a valid number.*$"), "should be a number"),
    (re.compile(r"^Input should be (.*)$"), r"should be \1"),
)


def reworded(message: str) -> str:
    """A validator's message in the command line's words ('should be 1 or more', not 'Input should be greater than or
    equal to 1'): the parser's usage errors and `--set` say it alike."""
    message = message.strip().rstrip(".")
    for pattern, words in _REWORDED:
        if pattern.match(message):
            return pattern.sub(words, message)
    return message[:1].lower() + message[1:]


class ConfigError(ValueError):
    """A preset, override or config that cannot be used; the message names it and why."""


class MovedKey(UserWarning):
    """A config key written where it used to be: still read, told once in one line naming where it is written now."""


def format_validation(err) -> str:
    """A pydantic `ValidationError` as one line: each bad key with what is wrong (a check of several keys, which has
    no one key to name, says it in its own words)."""
    parts = []
    errors = err.errors()
    inner = [tuple(e["loc"]) for e in errors]
    for e in errors:
        here = tuple(e["loc"])
        if e["type"] == "too_short" and any(len(o) > len(here) and o[:len(here)] == here for o in inner):
            continue  # a list left empty by its own bad item: the item's error says it
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)
