"""Identities (§3) and constants (§17)."""

from __future__ import annotations

import re

import pytest

import trio_triggers as tt
from trio_triggers._constants import is_safe_integer
from trio_triggers._identities import mint_reservation_id

H = 3_600_000


def test_constants() -> None:
    assert tt.MAX_SAFE_INTEGER == 2**53 - 1
    assert tt.MAX_OCCURRENCES == 1000
    assert tt.RESERVATION_PREFIX == "trigger-reservation:"
    assert tt.RESERVATION_LEASE_MS == 300_000
    assert tt.CANCEL_KEY_PREFIX == "trigger-cancel:"
    assert tt.DEFAULT_HOST == "local"
    assert tt.DEFAULT_CONCURRENCY == 4
    assert tt.PRUNE_INTERVAL_MS == 3_600_000
    assert tt.DURATION_BOUNDARIES_MS == (10, 100, 1000, 10000, 60000, 300000)
    assert tt.NEXT_OCCURRENCE_COUNT == 5
    assert (tt.DEFAULT_PAGE_SIZE, tt.MAX_PAGE_SIZE) == (100, 500)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, True),
        (-1, True),
        (2**53 - 1, True),
        (-(2**53 - 1), True),
        (2**53, False),
        (-(2**53), False),
        (True, False),
        (False, False),
        (1.0, False),
        (float("nan"), False),
        ("1", False),
        (None, False),
    ],
)
def test_is_safe_integer(value: object, expected: bool) -> None:
    assert is_safe_integer(value) is expected


def test_iso() -> None:
    assert tt.iso(3 * H) == "1970-01-01T03:00:00.000Z"
    assert tt.iso(0) == "1970-01-01T00:00:00.000Z"
    assert tt.iso(-1) == "1969-12-31T23:59:59.999Z"
    assert tt.iso(1_773_417_600_457) == "2026-03-13T16:00:00.457Z"
    # Four-digit years at both ends of the representable range.
    assert tt.iso(-62_135_596_800_000) == "0001-01-01T00:00:00.000Z"
    assert tt.iso(253_402_300_799_999) == "9999-12-31T23:59:59.999Z"
    with pytest.raises(ValueError, match="outside the years 0001-9999"):
        tt.iso(253_402_300_800_000 * 1000)


def test_idempotency_key() -> None:
    assert tt.idempotency_key("hourly", 3 * H) == "hourly:1970-01-01T03:00:00.000Z"
    assert (
        tt.idempotency_key("weekly-review", 1_773_417_600_000)
        == "weekly-review:2026-03-13T16:00:00.000Z"
    )


def test_reservation_ids() -> None:
    assert tt.reservation_id("hourly", 3_600_000) == "trigger-reservation:hourly:3600000"
    assert tt.reservation_id("hourly", 1, "a") == "trigger-reservation:hourly:a:1"
    assert tt.reservation_id("hourly", 1, "") == "trigger-reservation:hourly:1"
    minted = mint_reservation_id("daily", 1)
    assert re.fullmatch(r"trigger-reservation:daily:[^:]+:1", minted)
    attempt = minted.split(":")[2]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", attempt)
    assert mint_reservation_id("daily", 1) != minted


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("trigger-reservation:hourly:3600000", 3_600_000),
        ("trigger-reservation:hourly:abc-def:3600000", 3_600_000),
        ("trigger-reservation:hourly:nope", None),
        ("run-1", None),
        (None, None),
        (42, None),
        ("trigger-reservation:", 0),
        ("trigger-reservation:x: ", 0),
        ("trigger-reservation:x: -12\t", -12),
        ("trigger-reservation:x:+7", 7),
        ("trigger-reservation:x:1_000", None),
        ("trigger-reservation:x:\u0661", None),  # Arabic-Indic digit one: not ASCII
        ("trigger-reservation:x:1.5", None),
        ("trigger-reservation:x:--1", None),
    ],
)
def test_reservation_occurrence(value: object, expected: int | None) -> None:
    assert tt.reservation_occurrence(value) == expected


def test_is_reservation() -> None:
    assert tt.is_reservation("trigger-reservation:x:1")
    assert not tt.is_reservation(None)
    assert not tt.is_reservation("run-1")
    assert not tt.is_reservation(b"trigger-reservation:x:1")
