"""Test doubles whose every operation is scripted one by one.

* :class:`NoopTriggerStore` (``triggers.md`` §19): every method raises ``store``,
  ``<method> is unavailable``, except the ones given as keyword overrides.
* :class:`ScriptedRunStore` (``ownership.md`` §10.17): every operation answers the documented
  default, except the ones given as keyword overrides.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, final

from .._errors import RunStoreError, TriggerError
from .._ownership._models import ClaimLost, NotFound
from .._store._protocol import TRIGGER_STORE_METHODS

__all__ = ["NoopTriggerStore", "ScriptedRunStore"]

AsyncFn = Callable[..., Awaitable[Any]]


def _unavailable(method: str) -> AsyncFn:
    async def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise TriggerError("store", f"{method} is unavailable")

    return unavailable


@final
class NoopTriggerStore:
    """A trigger store that does nothing: each method raises ``store``, ``<method> is
    unavailable`` unless replaced by a keyword override (an async callable)."""

    def __init__(self, **overrides: AsyncFn) -> None:
        unknown = sorted(set(overrides) - set(TRIGGER_STORE_METHODS))
        if unknown:
            raise TypeError(f"not TriggerStore methods: {', '.join(unknown)}")
        for method in TRIGGER_STORE_METHODS:
            setattr(self, method, overrides.get(method) or _unavailable(method))

    def __getattr__(self, name: str) -> Any:  # pragma: no cover - only for type checkers
        raise AttributeError(name)


RUN_STORE_METHODS: Final = (
    "create",
    "get",
    "claim",
    "activate",
    "abandon_claim",
    "claim_and_own",
    "steal",
    "recover_claim",
    "heartbeat",
    "reconfirm",
    "transition_owned",
    "request_cancel",
    "acknowledge_cancel",
)


def _default(method: str) -> AsyncFn:
    async def default(*args: Any, **kwargs: Any) -> Any:
        if method in ("create", "get"):
            raise RunStoreError("persistence_failed", method, f"{method} is not scripted")
        if method == "acknowledge_cancel":
            return False
        if method in ("activate", "abandon_claim"):
            return ClaimLost()
        return NotFound()

    return default


@final
class ScriptedRunStore:
    """A run store whose operations answer the defaults of ``ownership.md`` §10.17 unless
    overridden one by one (``ScriptedRunStore(reconfirm=my_async_fn)``). Every call is recorded
    in :attr:`calls` as ``(method, args, kwargs)``."""

    def __init__(self, **overrides: AsyncFn) -> None:
        unknown = sorted(set(overrides) - set(RUN_STORE_METHODS))
        if unknown:
            raise TypeError(f"not RunStore methods: {', '.join(unknown)}")
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        for method in RUN_STORE_METHODS:
            setattr(
                self, method, self._recording(method, overrides.get(method) or _default(method))
            )

    def _recording(self, method: str, fn: AsyncFn) -> AsyncFn:
        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((method, args, kwargs))
            return await fn(*args, **kwargs)

        return call

    def __getattr__(self, name: str) -> Any:  # pragma: no cover - only for type checkers
        raise AttributeError(name)
