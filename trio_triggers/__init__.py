"""trio-triggers: durable cron triggers and fenced run ownership for Trio.

The public API is what this module exports (``__all__``) plus the documented submodules
``trio_triggers.testing``, ``trio_triggers.postgres`` and ``trio_triggers.cli``.

Docstrings cite the design contract the package was built against by section number
(``triggers.md`` §10.2, ``ownership.md`` §11, ...). ``docs/design/section-map.toml`` maps
every such number to the design page and heading that explains it (a bare § in a
run-ownership module means ``ownership.md``, elsewhere ``triggers.md``), and a test keeps the
map complete.

The imports below are grouped by layer, lowest first, as docs/architecture.md draws them; each
name is re-exported explicitly (``from x import y as y``), which is how type checkers tell a
public re-export from an implementation detail.
"""

from __future__ import annotations

# --- Foundation: clocks, errors, the blocking seam, the contract's constants
# Every layer below may use these; they import nothing of ours but each other.
from ._clock import (
    EpochMs as EpochMs,
    SystemWallClock as SystemWallClock,
    TrioWallClock as TrioWallClock,
    WallClock as WallClock,
)
from ._constants import (
    CANCEL_KEY_PREFIX as CANCEL_KEY_PREFIX,
    DEFAULT_CONCURRENCY as DEFAULT_CONCURRENCY,
    DEFAULT_HOST as DEFAULT_HOST,
    DEFAULT_PAGE_SIZE as DEFAULT_PAGE_SIZE,
    DURATION_BOUNDARIES_MS as DURATION_BOUNDARIES_MS,
    MAX_OCCURRENCES as MAX_OCCURRENCES,
    MAX_PAGE_SIZE as MAX_PAGE_SIZE,
    MAX_SAFE_INTEGER as MAX_SAFE_INTEGER,
    NEXT_OCCURRENCE_COUNT as NEXT_OCCURRENCE_COUNT,
    PRUNE_INTERVAL_MS as PRUNE_INTERVAL_MS,
    RESERVATION_LEASE_MS as RESERVATION_LEASE_MS,
    RESERVATION_PREFIX as RESERVATION_PREFIX,
)
from ._errors import (
    LeaseLost as LeaseLost,
    RunStoreError as RunStoreError,
    TriggerError as TriggerError,
)
from ._executor import (
    Executor as Executor,
    InlineExecutor as InlineExecutor,
    ThreadExecutor as ThreadExecutor,
)
from ._watch import Watched as Watched

# isort: split
# --- Schedules: cron, declarations, identities, JSON, the pure catch-up and overlap policies
# Pure functions of a declaration and a time: no I/O, no clock of their own.
from ._cron import (
    Cron as Cron,
    host_timezone as host_timezone,
)
from ._declarations import (
    Backfill as Backfill,
    BackfillState as BackfillState,
    CatchUp as CatchUp,
    Overlap as Overlap,
    Pause as Pause,
    RegisteredTrigger as RegisteredTrigger,
    Schedule as Schedule,
    Trigger as Trigger,
)
from ._identities import (
    idempotency_key as idempotency_key,
    is_reservation as is_reservation,
    iso as iso,
    reservation_id as reservation_id,
    reservation_occurrence as reservation_occurrence,
)
from ._json import (
    JsonValue as JsonValue,
)
from ._policies import (
    DueOccurrences as DueOccurrences,
    OverlapDecision as OverlapDecision,
    catch_up_occurrences as catch_up_occurrences,
    due_occurrences as due_occurrences,
    next_occurrences as next_occurrences,
    overlap_decision as overlap_decision,
    pending_after as pending_after,
)

# isort: split
# --- Trigger store: the claim protocol over memory and SQLite (PostgreSQL: .postgres)
from ._store import (
    Claim as Claim,
    ClaimAction as ClaimAction,
    Fire as Fire,
    FireRecord as FireRecord,
    Held as Held,
    HistoryPage as HistoryPage,
    HistoryQuery as HistoryQuery,
    Listed as Listed,
    MemoryTriggerStore as MemoryTriggerStore,
    Outcome as Outcome,
    PendingClaim as PendingClaim,
    Result as Result,
    Resumed as Resumed,
    ResumePoint as ResumePoint,
    SchedulerHeartbeat as SchedulerHeartbeat,
    SqliteTriggerStore as SqliteTriggerStore,
    TriggerStore as TriggerStore,
    listed as listed,
    open_sqlite_trigger_store as open_sqlite_trigger_store,
)

# isort: split
# --- Run ownership: owner identity, liveness, the fenced run store, the heartbeat lease
# A sibling of the trigger store: neither imports the other.
from ._ownership import (
    HEARTBEAT_INTERVAL_MS as HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_SKEW_ALLOWANCE_MS as HEARTBEAT_SKEW_ALLOWANCE_MS,
    HEARTBEAT_STALE_AFTER_MS as HEARTBEAT_STALE_AFTER_MS,
    HEARTBEAT_WRITE_TOLERANCE_MS as HEARTBEAT_WRITE_TOLERANCE_MS,
    OUTPUT_TAIL_BYTES as OUTPUT_TAIL_BYTES,
    Abandoned as Abandoned,
    Activated as Activated,
    AlreadyClaimed as AlreadyClaimed,
    AlreadyRequested as AlreadyRequested,
    CancelAcknowledgement as CancelAcknowledgement,
    CancelRequested as CancelRequested,
    ClaimChanged as ClaimChanged,
    Claimed as Claimed,
    ClaimFresh as ClaimFresh,
    ClaimLost as ClaimLost,
    Created as Created,
    EvidenceKind as EvidenceKind,
    EvidenceRequired as EvidenceRequired,
    Existing as Existing,
    FenceLost as FenceLost,
    GuardFailed as GuardFailed,
    HeartbeatFresh as HeartbeatFresh,
    Lease as Lease,
    LivenessCheck as LivenessCheck,
    LivenessContext as LivenessContext,
    LivenessEvidence as LivenessEvidence,
    LivenessProbe as LivenessProbe,
    LivenessUnconfirmed as LivenessUnconfirmed,
    MemoryRunStore as MemoryRunStore,
    NotFound as NotFound,
    OwnerId as OwnerId,
    Recovered as Recovered,
    RunOutput as RunOutput,
    RunRow as RunRow,
    RunSnapshot as RunSnapshot,
    RunStatus as RunStatus,
    RunStore as RunStore,
    SnapshotChanged as SnapshotChanged,
    SqliteRunStore as SqliteRunStore,
    Terminal as Terminal,
    Transitioned as Transitioned,
    TransitionGuard as TransitionGuard,
    Updated as Updated,
    heartbeat_loop as heartbeat_loop,
    hold_lease as hold_lease,
    lease_liveness as lease_liveness,
    matches_evidence as matches_evidence,
    open_sqlite_run_store as open_sqlite_run_store,
    probe_from_check as probe_from_check,
    same_host_incarnation as same_host_incarnation,
    same_host_pid_probe as same_host_pid_probe,
)

# isort: split
# --- Scheduler and runners: ticks, claims, launches and monitors over a Runner port
from ._scheduler import (
    PARKED_ATTEMPTS as PARKED_ATTEMPTS,
    Accepted as Accepted,
    AlreadyApplied as AlreadyApplied,
    CancelRequest as CancelRequest,
    Conflict as Conflict,
    ControlPlane as ControlPlane,
    ControlRunner as ControlRunner,
    NoopRunner as NoopRunner,
    Parked as Parked,
    Plan as Plan,
    PlanRun as PlanRun,
    Receipt as Receipt,
    RunEndSignal as RunEndSignal,
    RunInfo as RunInfo,
    Runner as Runner,
    RunState as RunState,
    Scheduler as Scheduler,
    SchedulerOptions as SchedulerOptions,
    StartRequest as StartRequest,
    TerminalReceipt as TerminalReceipt,
    TriggerSummary as TriggerSummary,
    fires as fires,
    notify_registered as notify_registered,
    open_scheduler as open_scheduler,
    summaries as summaries,
)

# isort: split
# --- The embedded runner: flows in this process, runs in the run store
from ._local_runner import (
    LocalRunner as LocalRunner,
    RunContext as RunContext,
    open_local_runner as open_local_runner,
)

# isort: split
# --- The application stack: both stores on one database, the LocalRunner and a scheduler
from ._app import (
    DEFAULT_DATABASE as DEFAULT_DATABASE,
    RunReport as RunReport,
    Triggers as Triggers,
    open_triggers as open_triggers,
)

__version__ = "0.1.0"

__all__ = [
    "CANCEL_KEY_PREFIX",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_DATABASE",
    "DEFAULT_HOST",
    "DEFAULT_PAGE_SIZE",
    "DURATION_BOUNDARIES_MS",
    "HEARTBEAT_INTERVAL_MS",
    "HEARTBEAT_SKEW_ALLOWANCE_MS",
    "HEARTBEAT_STALE_AFTER_MS",
    "HEARTBEAT_WRITE_TOLERANCE_MS",
    "MAX_OCCURRENCES",
    "MAX_PAGE_SIZE",
    "MAX_SAFE_INTEGER",
    "NEXT_OCCURRENCE_COUNT",
    "OUTPUT_TAIL_BYTES",
    "PARKED_ATTEMPTS",
    "PRUNE_INTERVAL_MS",
    "RESERVATION_LEASE_MS",
    "RESERVATION_PREFIX",
    "Abandoned",
    "Accepted",
    "Activated",
    "AlreadyApplied",
    "AlreadyClaimed",
    "AlreadyRequested",
    "Backfill",
    "BackfillState",
    "CancelAcknowledgement",
    "CancelRequest",
    "CancelRequested",
    "CatchUp",
    "Claim",
    "ClaimAction",
    "ClaimChanged",
    "ClaimFresh",
    "ClaimLost",
    "Claimed",
    "Conflict",
    "ControlPlane",
    "ControlRunner",
    "Created",
    "Cron",
    "DueOccurrences",
    "EpochMs",
    "EvidenceKind",
    "EvidenceRequired",
    "Executor",
    "Existing",
    "FenceLost",
    "Fire",
    "FireRecord",
    "GuardFailed",
    "HeartbeatFresh",
    "Held",
    "HistoryPage",
    "HistoryQuery",
    "InlineExecutor",
    "JsonValue",
    "Lease",
    "LeaseLost",
    "Listed",
    "LivenessCheck",
    "LivenessContext",
    "LivenessEvidence",
    "LivenessProbe",
    "LivenessUnconfirmed",
    "LocalRunner",
    "MemoryRunStore",
    "MemoryTriggerStore",
    "NoopRunner",
    "NotFound",
    "Outcome",
    "Overlap",
    "OverlapDecision",
    "OwnerId",
    "Parked",
    "Pause",
    "PendingClaim",
    "Plan",
    "PlanRun",
    "Receipt",
    "Recovered",
    "RegisteredTrigger",
    "Result",
    "ResumePoint",
    "Resumed",
    "RunContext",
    "RunEndSignal",
    "RunInfo",
    "RunOutput",
    "RunReport",
    "RunRow",
    "RunSnapshot",
    "RunState",
    "RunStatus",
    "RunStore",
    "RunStoreError",
    "Runner",
    "Schedule",
    "Scheduler",
    "SchedulerHeartbeat",
    "SchedulerOptions",
    "SnapshotChanged",
    "SqliteRunStore",
    "SqliteTriggerStore",
    "StartRequest",
    "SystemWallClock",
    "Terminal",
    "TerminalReceipt",
    "ThreadExecutor",
    "TransitionGuard",
    "Transitioned",
    "Trigger",
    "TriggerError",
    "TriggerStore",
    "TriggerSummary",
    "Triggers",
    "TrioWallClock",
    "Updated",
    "WallClock",
    "Watched",
    "__version__",
    "catch_up_occurrences",
    "due_occurrences",
    "fires",
    "heartbeat_loop",
    "hold_lease",
    "host_timezone",
    "idempotency_key",
    "is_reservation",
    "iso",
    "lease_liveness",
    "listed",
    "matches_evidence",
    "next_occurrences",
    "notify_registered",
    "open_local_runner",
    "open_scheduler",
    "open_sqlite_run_store",
    "open_sqlite_trigger_store",
    "open_triggers",
    "overlap_decision",
    "pending_after",
    "probe_from_check",
    "reservation_id",
    "reservation_occurrence",
    "same_host_incarnation",
    "same_host_pid_probe",
    "summaries",
]
