"""The :class:`TriggerStore` protocol (``triggers.md`` §9.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, Protocol, get_args, runtime_checkable

if TYPE_CHECKING:
    import builtins

    from .._declarations import RegisteredTrigger, Trigger
    from ._attention import DueRow
    from ._models import (
        Claim,
        Dropped,
        Held,
        HistoryPage,
        HistoryQuery,
        Listed,
        PendingClaim,
        Result,
        SchedulerHeartbeat,
    )

__all__ = [
    "ATTENTION_STORE_METHODS",
    "CLOCK_METHODS",
    "METHODS",
    "NO_TRIGGER_WRITE_METHODS",
    "READ_ONLY_METHODS",
    "TRIGGER_STORE_METHODS",
    "TRIGGER_WRITE_METHODS",
    "AttentionStore",
    "BackfillStore",
    "Method",
    "TriggerStore",
    "protocol_methods",
]


@runtime_checkable
class TriggerStore(Protocol):
    """Durable trigger declarations, their held state and the fire ledger.

    Every method is one atomic transaction: it either commits everything it writes or nothing,
    and a method that raises writes nothing. There is deliberately no overlap policy in a claim:
    the store applies the policy stored on the row. Failures are ``TriggerError``\\ s (driver
    failures become code ``store``).
    """

    async def register(self, trigger: Trigger) -> RegisteredTrigger:
        """Create or update a declaration (revision 1, then +1); held state is kept.

        After a successful registration the store calls
        ``trio_triggers.notify_registered(self)``: the store owns the wake-up of this
        process's schedulers (docs/scheduler.md, "Who wakes the loop").
        """
        ...

    async def get(self, trigger_id: str) -> RegisteredTrigger | None:
        """The stored declaration, or ``None``."""
        ...

    async def list(self) -> builtins.list[Listed]:
        """Every row ordered by id, each with its declaration or its decode error."""
        ...

    async def list_enabled(self) -> builtins.list[RegisteredTrigger]:
        """The enabled declarations ordered by id (an undecodable row fails the call)."""
        ...

    async def claim_fire(
        self,
        trigger_id: str,
        occurrence: int,
        *,
        expected_revision: int,
        resume_buffered: bool = False,
        dropped: Dropped | None = None,
    ) -> Claim:
        """Claim one occurrence under the stored policy (``triggers.md`` §9.6, §10).

        ``dropped`` is what the caller's catch-up gave up just before ``occurrence``: the store
        counts it in this claim's transaction when the claim is granted (:class:`Dropped`)."""
        ...

    async def claim_pending(
        self, trigger_id: str, *, expected_revision: int
    ) -> PendingClaim | None:
        """Claim the pending (buffered or re-armed) occurrence, if any (§9.7)."""
        ...

    async def record_result(self, result: Result) -> None:
        """Record what happened to a fire, fenced by ownership (§9.8)."""
        ...

    async def restore_pending(self, trigger_id: str, occurrence: int, reservation_id: str) -> None:
        """Give back a reservation whose launch could not be completed (§9.9)."""
        ...

    async def set_pending(self, trigger_id: str, occurrence: int) -> None:
        """Raise the pending slot to at least ``occurrence`` (§9.10)."""
        ...

    async def active_run(self, trigger_id: str) -> str | None:
        """The holder after enforcing the reservation lease (a write, §9.11)."""
        ...

    async def active_occurrence(self, trigger_id: str, run_id: str) -> int | None:
        """The occurrence a reservation or a launched run belongs to (§9.12)."""
        ...

    async def clear_active(self, trigger_id: str, run_id: str) -> None:
        """Compare-and-swap the holder ``run_id`` to nothing (§9.13)."""
        ...

    async def history(self, query: HistoryQuery | None = None) -> HistoryPage:
        """Ledger rows newest first, filtered and paged (§9.14)."""
        ...

    async def prune_fires(self, older_than: int) -> int:
        """Delete settled, unprotected ledger rows older than the cutoff (§9.15)."""
        ...

    async def inspect(self, trigger_id: str) -> Held:
        """The raw holder and pending slot; never expires anything (§9.5)."""
        ...

    async def heartbeat(self, host: str) -> None:
        """Record that ``host`` ticked now (§9.16)."""
        ...

    async def last_heartbeat(self) -> SchedulerHeartbeat | None:
        """The most recent heartbeat, ties broken by the lowest host (§9.16)."""
        ...


@runtime_checkable
class AttentionStore(Protocol):
    """The attention-index reads a scheduler tick uses when a store has them.

    Every built-in store does (``docs/store.md``, "The attention index"); a scheduler on a store
    without them lists every row on every tick, as the contract's reference design does.
    """

    async def due(self, now: int, *, limit: int = 1024, hold_ms: int = 0) -> builtins.list[DueRow]:
        """The rows whose attention instant is at or before ``now``, earliest first (taken
        for ``hold_ms`` when it is positive)."""
        ...

    async def next_attention(self) -> int | None:
        """The earliest attention instant of any row, or ``None``."""
        ...

    async def holding(self) -> builtins.list[DueRow]:
        """Every row with a holder (a reservation or a run), ordered by id."""
        ...


@runtime_checkable
class BackfillStore(Protocol):
    """The step a scheduler takes of a trigger's running backfill (the built-in stores).

    Starting and cancelling one are operator calls (``start_backfill``, ``cancel_backfill``);
    a scheduler only steps (``docs/operations.md``, "Backfill").
    """

    async def backfill_step(
        self, trigger_id: str, occurrence: int, *, expected_revision: int
    ) -> Claim:
        """Claim the backfill's next boundary ``occurrence`` and move its progress on."""
        ...


# --- the method names, declared once -------------------------------------------------------
#
# Every name below is a method of the protocols above (or ``register_many``, the built-in stores'
# bulk registration, or ``pause``/``resume``/``remove`` and the backfill methods, their operator
# state, or ``claim_manual``, their "run now"), grouped by what its transaction may write;
# tests/store/test_method_names.py checks that the groups are exactly the protocols' methods.
# Everything that lists the methods (the engine's ``Method``, read transactions, failure
# messages, the test doubles' tables) takes
# them from here.

ReadMethod = Literal[
    "get",
    "list",
    "list_enabled",
    "active_occurrence",
    "history",
    "inspect",
    "last_heartbeat",
    "next_attention",
    "holding",
]
"""Methods that never write (a read transaction; a failure says ``trigger store read failed``)."""
TriggerWriteMethod = Literal[
    "register",
    "register_many",
    "claim_fire",
    "claim_pending",
    "claim_manual",
    "record_result",
    "restore_pending",
    "set_pending",
    "active_run",
    "clear_active",
    "prune_fires",
    "pause",
    "resume",
    "remove",
    "start_backfill",
    "cancel_backfill",
    "backfill_step",
]
"""Methods that may write declarations, held state or the ledger."""
TakeMethod = Literal["due"]
"""``due``: writes only ``attention_at_ms`` (its take), which no declaration or ledger reads."""
HeartbeatMethod = Literal["heartbeat"]
"""``heartbeat``: writes only ``tt_scheduler_heartbeats``."""
Method = Literal[ReadMethod, TriggerWriteMethod, TakeMethod, HeartbeatMethod]
"""Every method a store runs as one transaction."""

METHODS: Final[tuple[Method, ...]] = get_args(Method)
READ_ONLY_METHODS: Final[frozenset[str]] = frozenset(get_args(ReadMethod))
#: Methods that change no declaration, held state or ledger row (the reads and ``due``'s take).
NO_TRIGGER_WRITE_METHODS: Final[frozenset[str]] = READ_ONLY_METHODS | frozenset(
    get_args(TakeMethod)
)
#: Methods that may change a declaration, held state or a ledger row.
TRIGGER_WRITE_METHODS: Final[frozenset[str]] = frozenset(get_args(TriggerWriteMethod))
#: The methods whose transaction reads the store's clock ("now"): exactly those the contract
#: gives a "now" (a registration's stamp, a claim's lease, a holder's expiry, a heartbeat).
#: Every other method's transaction never reads it (``record_result`` reads the clock once,
#: before its transaction, for a ``failed`` result only: the time of the pause that
#: ``pause_after_failures`` may take).
CLOCK_METHODS: Final[frozenset[str]] = frozenset(
    {
        "register",
        "register_many",
        "claim_fire",
        "claim_pending",
        "claim_manual",
        "active_run",
        "heartbeat",
        "pause",
        "resume",
        "remove",
        "start_backfill",
        "backfill_step",
    }
)


def protocol_methods(protocol: type) -> tuple[str, ...]:
    """The public methods ``protocol`` declares, in declaration order."""
    return tuple(
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and callable(value)
    )


#: The :class:`TriggerStore` methods, in declaration order.
TRIGGER_STORE_METHODS: Final[tuple[str, ...]] = protocol_methods(TriggerStore)
#: The :class:`AttentionStore` methods, in declaration order.
ATTENTION_STORE_METHODS: Final[tuple[str, ...]] = protocol_methods(AttentionStore)
