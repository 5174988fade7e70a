# mypy: disable-error-code="misc"
"""Bad input raises ``invalid_run`` before any row is read, and changes nothing (§1.6-§1.8)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from trio_triggers import RunStoreError
from trio_triggers._ownership import (
    LivenessEvidence,
    OwnerId,
    RunRow,
    RunSnapshot,
    RunStoreBase,
    TransitionGuard,
)

from .helpers import PENDING, A, B, created, dump, ev, running, running_snapshot

if TYPE_CHECKING:
    from .backends import ManualClock

S0 = running_snapshot(A, 0)
LONG = "x" * 2_000


def owner(**changes: Any) -> OwnerId:
    return msgspec.structs.replace(A, **changes)


class SubSnapshot(RunSnapshot, frozen=True, kw_only=True):
    pass


class Lookalike:
    status = "running"
    owner = A
    heartbeat_at_ms = 0


BAD_OWNERS = {
    "empty host": owner(host_id=""),
    "long host": owner(host_id=LONG),
    "empty nonce": owner(nonce=""),
    "long nonce": owner(nonce=LONG),
    "NUL host": owner(host_id="a\x00b"),
    "surrogate nonce": owner(nonce="\ud800"),
    "negative pid": owner(pid=-1),
    "float pid": owner(pid=1.0),
    "bool pid": owner(pid=True),
    "str pid": owner(pid="1"),
    "huge pid": owner(pid=2**53),
    "dict": {"host_id": "h", "pid": 1, "nonce": "n"},
    "None": None,
}

BAD_SNAPSHOTS = {
    "dict": {"status": "pending", "owner": None, "heartbeat_at_ms": None},
    "dict with extra keys": {"status": "pending", "owner": None, "heartbeat_at_ms": None, "x": 1},
    "subclass": SubSnapshot(status="pending", owner=None, heartbeat_at_ms=None),
    "lookalike": Lookalike(),
    "running without stamp": RunSnapshot(status="running", owner=A, heartbeat_at_ms=None),
    "pending with owner": RunSnapshot(status="pending", owner=A, heartbeat_at_ms=None),
    "pending with stamp": RunSnapshot(status="pending", owner=None, heartbeat_at_ms=3),
    "running without owner": RunSnapshot(status="running", owner=None, heartbeat_at_ms=3),
    "running bad owner": RunSnapshot(status="running", owner=owner(pid=-3), heartbeat_at_ms=3),
    "bad status": RunSnapshot(status="paused", owner=None, heartbeat_at_ms=None),  # type: ignore[arg-type]
    "float stamp": RunSnapshot(status="running", owner=A, heartbeat_at_ms=1.0),  # type: ignore[arg-type]
}

BAD_INSTANTS = {
    "negative": -1,
    "float": 5.0,
    "nan": float("nan"),
    "inf": float("inf"),
    "bool": True,
    "too big": 2**53,
    "str": "5",
}

BAD_JSON = {
    "not JSON": "{'a': 1}",
    "empty": "",
    "NaN": "[NaN]",
    "Infinity": '{"a": -Infinity}',
    "trailing comma": "[1,]",
    "too deep": "[" * 129 + "]" * 129,
    "far too deep": "[" * 100_000 + "]" * 100_000,
    "surrogate escape": '"\\ud800"',
    "raw surrogate": '"\ud800"',
    "too many values": "[" + ",".join(["0"] * 100_001) + "]",
    "not a str": {"a": 1},
    "bytes": b"{}",
}


def bad_evidence() -> dict[str, Any]:
    return {
        "dict": {"expected_owner": A, "checked_at_ms": 0, "kind": "lease-expired"},
        "nan instant": LivenessEvidence(
            expected_owner=A,
            checked_at_ms=float("nan"),  # type: ignore[arg-type]
            kind="lease-expired",
        ),
        "bad kind": LivenessEvidence(expected_owner=A, checked_at_ms=0, kind="guess"),  # type: ignore[arg-type]
        "bad owner": ev(owner(pid=-1), 0, "lease-expired"),
    }


Call = Callable[[RunStoreBase], Awaitable[object]]


def cases() -> dict[str, tuple[str, Call]]:
    """name -> (method, call). Every call targets rows that exist (or would refuse)."""
    out: dict[str, tuple[str, Call]] = {}
    for name, bad in BAD_OWNERS.items():
        out[f"claim claimant {name}"] = ("claim", lambda s, b=bad: s.claim("p", PENDING, b, 0))
        out[f"heartbeat owner {name}"] = ("heartbeat", lambda s, b=bad: s.heartbeat("r", b, 0))
        out[f"claim_and_own owner {name}"] = (
            "claim_and_own",
            lambda s, b=bad: s.claim_and_own("p", PENDING, b, 0),
        )
        out[f"transition owner {name}"] = (
            "transition_owned",
            lambda s, b=bad: s.transition_owned("r", b, "completed"),
        )
        out[f"recover observer {name}"] = (
            "recover_claim",
            lambda s, b=bad: s.recover_claim("p", A, 0, b, 0, ev(A, 0, "lease-expired")),
        )
    for name, bad in BAD_SNAPSHOTS.items():
        out[f"claim snapshot {name}"] = ("claim", lambda s, b=bad: s.claim("p", b, B, 0))
        out[f"steal snapshot {name}"] = (
            "steal",
            lambda s, b=bad: s.steal("r", b, B, 0, ev(A, 0, "lease-expired")),
        )
        out[f"activate snapshot {name}"] = ("activate", lambda s, b=bad: s.activate("p", B, 0, b))
    for name, bad in BAD_INSTANTS.items():
        out[f"heartbeat now {name}"] = ("heartbeat", lambda s, b=bad: s.heartbeat("r", A, b))
        out[f"claim now {name}"] = ("claim", lambda s, b=bad: s.claim("p", PENDING, B, b))
        out[f"activate token {name}"] = (
            "activate",
            lambda s, b=bad: s.activate("p", B, b, PENDING),
        )
        out[f"request_cancel now {name}"] = (
            "request_cancel",
            lambda s, b=bad: s.request_cancel("r", b),
        )
        out[f"acknowledge now {name}"] = (
            "acknowledge_cancel",
            lambda s, b=bad: s.acknowledge_cancel("r", A, b),
        )
    for name, bad in BAD_JSON.items():
        out[f"create state {name}"] = ("create", lambda s, b=bad: s.create("new", b))
        out[f"create input {name}"] = (
            "create",
            lambda s, b=bad: s.create("new", "{}", input_json=b),
        )
        out[f"transition state {name}"] = (
            "transition_owned",
            lambda s, b=bad: s.transition_owned("r", A, "running", state_json=b),
        )
        out[f"transition result {name}"] = (
            "transition_owned",
            lambda s, b=bad: s.transition_owned("r", A, "completed", result_json=b),
        )
    for name, bad in bad_evidence().items():
        out[f"steal evidence {name}"] = ("steal", lambda s, b=bad: s.steal("r", S0, B, 0, b))
        out[f"claim_and_own evidence {name}"] = (
            "claim_and_own",
            lambda s, b=bad: s.claim_and_own("r", S0, B, 0, b),
        )
        out[f"recover evidence {name}"] = (
            "recover_claim",
            lambda s, b=bad: s.recover_claim("p", A, 0, B, 0, b),
        )
    for name, bad in {"empty": "", "long": "r" * 1_025, "NUL": "r\x00", "int": 5}.items():
        out[f"create run_id {name}"] = ("create", lambda s, b=bad: s.create(b, "{}"))
        out[f"get run_id {name}"] = ("get", lambda s, b=bad: s.get(b))
        out[f"create flow_id {name}"] = (
            "create",
            lambda s, b=bad: s.create("new", "{}", flow_id=b),
        )
        out[f"create key {name}"] = (
            "create",
            lambda s, b=bad: s.create("new", "{}", idempotency_key=b),
        )
        out[f"heartbeat run_id {name}"] = ("heartbeat", lambda s, b=bad: s.heartbeat(b, A, 0))
    out["steal without evidence"] = ("steal", lambda s: s.steal("r", S0, B, 0, None))  # type: ignore[arg-type]
    out["recover without evidence"] = (
        "recover_claim",
        lambda s: s.recover_claim("p", A, 0, B, 0, None),  # type: ignore[arg-type]
    )
    out["to pending"] = ("transition_owned", lambda s: s.transition_owned("r", A, "pending"))
    out["to bogus"] = ("transition_owned", lambda s: s.transition_owned("r", A, "done"))  # type: ignore[arg-type]
    out["result with failed"] = (
        "transition_owned",
        lambda s: s.transition_owned("r", A, "failed", result_json="1"),
    )
    out["error with completed"] = (
        "transition_owned",
        lambda s: s.transition_owned("r", A, "completed", error="x"),
    )
    out["error too long"] = (
        "transition_owned",
        lambda s: s.transition_owned("r", A, "failed", error="e" * 65_537),
    )
    out["error with NUL"] = (
        "transition_owned",
        lambda s: s.transition_owned("r", A, "failed", error="a\x00"),
    )
    out["guard maybe"] = (
        "transition_owned",
        lambda s: s.transition_owned(
            "r",
            A,
            "completed",
            guard=TransitionGuard(cancel_requested="maybe"),  # type: ignore[arg-type]
        ),
    )
    out["guard dict"] = (
        "transition_owned",
        lambda s: s.transition_owned("r", A, "completed", guard={"cancel_requested": None}),  # type: ignore[arg-type]
    )
    out["ahead of the store clock"] = ("reconfirm", lambda s: s.reconfirm("r", A, 10_001))
    return out


CASES = cases()


@pytest.mark.parametrize("name", sorted(CASES))
async def test_bad_input_is_invalid_run_and_writes_nothing(
    store: RunStoreBase, clock: ManualClock, name: str
) -> None:
    await running(store, clock, "r", A, 0)
    await created(store, "p")
    before = await dump(store)
    method, call = CASES[name]
    with pytest.raises(RunStoreError) as info:
        await call(store)
    assert (info.value.code, info.value.method) == ("invalid_run", method)
    assert str(info.value).startswith(f"invalid_run: RunStore.{method}: ")
    assert await dump(store) == before


async def test_limits_are_inclusive(store: RunStoreBase) -> None:
    deep = "[" * 128 + "]" * 128
    assert (await store.create("d" * 1_024, deep)).row.state_json == deep
    many = "[" + ",".join(["0"] * 99_998) + "]"  # 99 999 values
    assert (await store.create("many", many)).row.state_json == many
    assert (await store.create("odd", '  "\\ud83d\\ude00 ok"  ')).row.state_json == (
        '  "\\ud83d\\ude00 ok"  '
    )


async def test_validation_order(store: RunStoreBase, clock: ManualClock) -> None:
    """run id, snapshot, identities, timestamps, evidence, then status/texts/guard."""

    async def message(call: Awaitable[object]) -> str:
        with pytest.raises(RunStoreError) as info:
            await call
        return info.value.message

    bad_ev = bad_evidence()["nan instant"]
    bad_owner = owner(pid=-1)
    assert "run_id" in await message(store.steal("", PENDING, bad_owner, -1, bad_ev))
    assert "expected" in await message(store.steal("r", {}, bad_owner, -1, bad_ev))  # type: ignore[arg-type]
    assert "claimant" in await message(store.steal("r", S0, bad_owner, -1, bad_ev))
    assert "now_ms" in await message(store.steal("r", S0, B, -1, bad_ev))
    assert "evidence" in await message(store.steal("r", S0, B, 0, bad_ev))
    assert "expected" in await message(store.activate("r", bad_owner, -1, {}))  # type: ignore[arg-type]
    assert "stale_claimant" in await message(
        store.recover_claim("r", bad_owner, -1, bad_owner, -1, bad_ev)
    )
    assert "observer" in await message(store.recover_claim("r", A, -1, bad_owner, -1, bad_ev))
    assert "claimed_at_ms" in await message(store.recover_claim("r", A, -1, B, -1, bad_ev))
    assert "owner" in await message(
        store.transition_owned("r", bad_owner, "pending", state_json="x")
    )
    assert "to_status" in await message(store.transition_owned("r", A, "pending", state_json="x"))
    assert "state_json" in await message(
        store.transition_owned("r", A, "completed", state_json="x", error="e")
    )
    assert "state_json" in await message(store.create("r", "x", flow_id=""))
    # invalid input wins even where the row would have produced a refusal outcome
    assert "evidence" in await message(store.steal("missing", S0, B, 0, bad_ev))


async def test_messages_never_include_values(store: RunStoreBase) -> None:
    secret = '{"password": "hunter2", ' * 1
    with pytest.raises(RunStoreError) as info:
        await store.create("r", secret)
    assert "hunter2" not in str(info.value)
    with pytest.raises(RunStoreError) as info:
        await store.create("hunter2\x00", "{}")
    assert "hunter2" not in str(info.value)


async def test_a_row_is_admitted_as_a_snapshot(store: RunStoreBase, clock: ManualClock) -> None:
    row = await created(store, "p")
    odd = msgspec.structs.replace(row, state_json="not even json", run_id="other")
    assert isinstance(odd, RunRow)
    outcome = await store.claim("p", odd, B, 0)  # only status/owner/stamp count
    assert type(outcome).__name__ == "Claimed"
