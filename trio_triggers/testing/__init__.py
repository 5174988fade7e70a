"""Testing support for trio-triggers (``triggers.md`` §19).

Each helper lives in its own private module; this package only re-exports them.
"""

from __future__ import annotations

# --- executors for deterministic tests under MockClock (store area) -----------------------
from ._autojump import AutojumpGuardExecutor

# --- scripted runner, fault-injecting stores, simulation (simulation area) ----------------
from ._faults import (
    Blocker,
    CallObserver,
    Fault,
    FaultKind,
    FaultyRunStore,
    FaultyTriggerStore,
    InjectedFault,
    StoreCall,
)
from ._invariants import CATALOGUE, InvariantInfo, SimulationViolation, Violation
from ._noop import NoopTriggerStore, ScriptedRunStore
from ._runner import RunPlan, ScriptedRunner
from ._sim_plant import PLANTED_BUGS
from ._sim_worlds import CATCH_AT_LEAST, CATCH_SEEDS, PLANTED_WORLDS, PlantedWorld
from ._simulate import SimConfig, SimReport, simulate, simulate_async

__all__ = [
    "CATALOGUE",
    "CATCH_AT_LEAST",
    "CATCH_SEEDS",
    "PLANTED_BUGS",
    "PLANTED_WORLDS",
    "AutojumpGuardExecutor",
    "Blocker",
    "CallObserver",
    "Fault",
    "FaultKind",
    "FaultyRunStore",
    "FaultyTriggerStore",
    "InjectedFault",
    "InvariantInfo",
    "NoopTriggerStore",
    "PlantedWorld",
    "RunPlan",
    "ScriptedRunStore",
    "ScriptedRunner",
    "SimConfig",
    "SimReport",
    "SimulationViolation",
    "StoreCall",
    "Violation",
    "simulate",
    "simulate_async",
]
