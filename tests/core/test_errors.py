"""The one masker of secrets in messages: a URL's password, and an HTTP URL's token given as its userinfo."""

import pytest

from fleet.core.errors import hide_passwords


@pytest.mark.parametrize(
    "text, shown",
    [
        ("postgresql+psycopg://fleet:s3cret@db:5432/x", "postgresql+psycopg://fleet:***@db:5432/x"),
        ("postgresql://fleet@db/x", "postgresql://fleet@db/x"),  # no password: nothing to hide
        ("pull from http://user:pw@prom:9090 failed", "pull from http://user:***@prom:9090 failed"),
        ("https://tok3n@hooks.example/act", "https://***@hooks.example/act"),  # a userinfo alone is a token
        ("HTTPS://tok3n@hooks.example", "HTTPS://***@hooks.example"),
        ("http://prom:9090/api", "http://prom:9090/api"),
        ("two: sqlite:///a.db and postgresql://u:p@h/d", "two: sqlite:///a.db and postgresql://u:***@h/d"),
        ("postgresql://fleet:pa@ss:s3cret@db:1/x", "postgresql://fleet:***@db:1/x"),  # an @ of its own: masked whole
        ("postgresql://fleet@db/x?password=s3cret&sslmode=require", "postgresql://fleet@db/x?password=***&sslmode=require"),
    ],
)
def test_secrets_are_masked(text, shown):
    assert hide_passwords(text) == shown
    for secret in ("s3cret", ":pw@", "tok3n", ":p@"):
        assert secret not in hide_passwords(text)
