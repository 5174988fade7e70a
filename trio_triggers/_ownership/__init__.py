"""Run ownership: owner identity, liveness evidence, the run stores and the heartbeat lease.

``ownership.md`` is the contract. Layout: :mod:`._owner` (identity, constants, input rules),
:mod:`._liveness` (evidence, checks, probes), :mod:`._models` (rows, outcomes, the protocol),
:mod:`._validate` and :mod:`._decide` (the pure validation and decisions every store shares),
:mod:`._base` (the shared operation flow), :mod:`._memory` and :mod:`._sqlite_store` (the
stores), :mod:`._lease` (``heartbeat_loop``, ``hold_lease``).
"""

from __future__ import annotations

from . import _models
from ._base import RunStoreBase
from ._lease import Lease, heartbeat_loop, hold_lease
from ._liveness import (
    EvidenceKind,
    LivenessCheck,
    LivenessContext,
    LivenessEvidence,
    LivenessProbe,
    lease_liveness,
    matches_evidence,
    probe_from_check,
    same_host_incarnation,
    same_host_pid_probe,
)
from ._memory import MemoryRunStore
from ._models import *  # noqa: F403 - the models are re-exported whole (their __all__ is the list)
from ._owner import (
    HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_SKEW_ALLOWANCE_MS,
    HEARTBEAT_STALE_AFTER_MS,
    HEARTBEAT_WRITE_TOLERANCE_MS,
    OwnerId,
)
from ._sqlite_store import SqliteRunStore, open_sqlite_run_store

__all__ = [
    "HEARTBEAT_INTERVAL_MS",
    "HEARTBEAT_SKEW_ALLOWANCE_MS",
    "HEARTBEAT_STALE_AFTER_MS",
    "HEARTBEAT_WRITE_TOLERANCE_MS",
    "EvidenceKind",
    "Lease",
    "LivenessCheck",
    "LivenessContext",
    "LivenessEvidence",
    "LivenessProbe",
    "MemoryRunStore",
    "OwnerId",
    "RunStoreBase",
    "SqliteRunStore",
    "heartbeat_loop",
    "hold_lease",
    "lease_liveness",
    "matches_evidence",
    "open_sqlite_run_store",
    "probe_from_check",
    "same_host_incarnation",
    "same_host_pid_probe",
]
__all__ += _models.__all__
