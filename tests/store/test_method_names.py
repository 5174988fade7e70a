"""The store's method names are declared once (``_store/_protocol.py``) and match the protocols."""

from __future__ import annotations

import inspect
from typing import get_args

from trio_triggers._store._engine import EngineStore
from trio_triggers._store._protocol import (
    ATTENTION_STORE_METHODS,
    METHODS,
    NO_TRIGGER_WRITE_METHODS,
    READ_ONLY_METHODS,
    TRIGGER_STORE_METHODS,
    TRIGGER_WRITE_METHODS,
    AttentionStore,
    HeartbeatMethod,
    Method,
    ReadMethod,
    TakeMethod,
    TriggerStore,
    TriggerWriteMethod,
)
from trio_triggers.testing import NoopTriggerStore
from trio_triggers.testing._faults import TRIGGER_STORE_READS
from trio_triggers.testing._invariants import _WRITES

#: Methods of the built-in stores that no protocol declares (bulk registration, operator state).
EXTRAS = {
    "register_many",
    "pause",
    "resume",
    "remove",
    "claim_manual",
    "start_backfill",
    "cancel_backfill",
    "backfill_step",
}


def public_methods(cls: type) -> set[str]:
    return {
        name
        for name, value in inspect.getmembers(cls)
        if not name.startswith("_") and inspect.iscoroutinefunction(value)
    }


def test_the_table_is_exactly_the_protocols_methods() -> None:
    protocols = public_methods(TriggerStore) | public_methods(AttentionStore)
    assert set(METHODS) == protocols | EXTRAS
    assert len(METHODS) == len(set(METHODS))  # each name in one group only
    assert set(TRIGGER_STORE_METHODS) == public_methods(TriggerStore)
    assert set(ATTENTION_STORE_METHODS) == public_methods(AttentionStore)
    assert get_args(Method) == METHODS


def test_the_engine_front_has_exactly_the_table() -> None:
    assert public_methods(EngineStore) == set(METHODS)


def test_the_groups_partition_the_table() -> None:
    groups = [ReadMethod, TriggerWriteMethod, TakeMethod, HeartbeatMethod]
    names = [name for group in groups for name in get_args(group)]
    assert sorted(names) == sorted(METHODS)
    assert frozenset(get_args(ReadMethod)) == READ_ONLY_METHODS
    assert frozenset(get_args(TriggerWriteMethod)) == TRIGGER_WRITE_METHODS
    assert READ_ONLY_METHODS | {"due"} == NO_TRIGGER_WRITE_METHODS


def test_the_test_doubles_take_their_names_from_the_table() -> None:
    store = NoopTriggerStore()
    assert all(callable(getattr(store, name)) for name in TRIGGER_STORE_METHODS)
    assert TRIGGER_STORE_READS is NO_TRIGGER_WRITE_METHODS
    assert _WRITES is TRIGGER_WRITE_METHODS
