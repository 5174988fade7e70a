"""The DSN fixture's skip/fail rule (needs no server: it points at a closed port)."""

from __future__ import annotations

import pytest

from tests import pg_support

UNREACHABLE = "postgresql://tt:secret@127.0.0.1:1/tt_test?connect_timeout=2"


def test_unset_dsn_skips_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pg_support.ENV_DSN, raising=False)
    monkeypatch.delenv(pg_support.ENV_REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="TT_POSTGRES_DSN is not set"):
        pg_support.server_dsn()


def test_unset_dsn_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pg_support.ENV_DSN, raising=False)
    monkeypatch.setenv(pg_support.ENV_REQUIRE, "1")
    with pytest.raises(pytest.fail.Exception, match="TT_REQUIRE_POSTGRES=1 but TT_POSTGRES_DSN"):
        pg_support.server_dsn()


def test_unreachable_server_skips_locally_with_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pg_support.ENV_DSN, UNREACHABLE)
    monkeypatch.delenv(pg_support.ENV_REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="is not reachable") as info:
        pg_support.server_dsn()
    assert "secret" not in str(info.value)  # the password is redacted from the reason


def test_unreachable_server_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pg_support.ENV_DSN, UNREACHABLE)
    monkeypatch.setenv(pg_support.ENV_REQUIRE, "1")
    with pytest.raises(pytest.fail.Exception, match="TT_REQUIRE_POSTGRES=1 but PostgreSQL at"):
        pg_support.server_dsn()


@pytest.mark.parametrize("value", ["", "0", "false"])
def test_require_flag_off_values(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(pg_support.ENV_REQUIRE, value)
    assert not pg_support.postgres_required()


def test_search_path_keeps_uris_uris() -> None:
    import psycopg.conninfo

    uri = pg_support.with_search_path("postgresql://tt:tt@127.0.0.1:5432/db?sslmode=disable", "s1")
    assert uri.startswith("postgresql://tt:tt@127.0.0.1:5432/db?")
    params = psycopg.conninfo.conninfo_to_dict(uri)
    assert params["options"] == "-c search_path=s1 -c synchronous_commit=off"
    assert params["sslmode"] == "disable"
    plain = pg_support.with_search_path("host=h dbname=d", "s2")
    assert "search_path=s2" in str(psycopg.conninfo.conninfo_to_dict(plain)["options"])
