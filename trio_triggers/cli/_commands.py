"""The CLI commands: ``run``, ``list``, ``history`` (its ``--follow`` is ``_follow``'s),
``show``, ``runs``, ``cancel``, ``next``, ``add``, ``remove``, ``enable``, ``disable``,
``prune`` and ``demo``.

Every command validates its input (config file, flags) completely before it opens a database,
so a bad config or a bad flag exits with status 2 and writes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import urllib.parse
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from .._app import RunReport, cancel_run
from .._clock import SystemWallClock, WallClock
from .._databases import is_dsn, open_stores, shown_db
from .._declarations import Pause, Trigger
from .._errors import RunStoreError, TriggerError
from .._identities import is_reservation, iso
from .._local_runner import FlowFn, LocalRunner, RunContext, open_local_runner
from .._operations import operator_name, pause_trigger, remove_trigger, resume_trigger
from .._ownership import (
    HEARTBEAT_STALE_AFTER_MS,
    OUTPUT_TAIL_BYTES,
    AttemptRecord,
    OwnerId,
    RunStore,
)
from .._ownership._base import RunStoreBase
from .._policies import next_launches
from .._scheduler import (
    Fired,
    SchedulerOptions,
    TriggerSummary,
    fires,
    open_scheduler,
    summaries,
)
from .._store import Fire, FireRecord, HistoryQuery, Listed, MissedCounts, TriggerStore
from ._backfill import backfill_command, backfill_line
from ._config import LoadedConfig, default_db_for, explain_trigger_error, load_config
from ._flows import CommandFlow
from ._output import format_instant, print_json, render_table
from ._time import format_local, parse_duration, relative

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable, Iterator
    from typing import TextIO

__all__ = ["CliError", "dispatch", "history_cells", "history_json", "run_errors_of"]

logger = logging.getLogger("trio_triggers.cli")

EVENT_POLL_S = 0.25
STATUS_EVERY_S = 15.0


class CliError(Exception):
    """A command failure with its exit status (2 usage/config, 1 runtime)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


# --- shared -----------------------------------------------------------------------------


def _resolve_db(args: argparse.Namespace, loaded: LoadedConfig | None, *, create: bool) -> str:
    if args.db:
        db = str(args.db)
    elif loaded is not None and loaded.config.database:
        db = loaded.config.database
        if not is_dsn(db) and db != ":memory:":
            db = str(loaded.directory / db)
    elif loaded is not None:
        db = str(default_db_for(loaded.path))
    elif Path("trio-triggers.sqlite").exists():
        db = "trio-triggers.sqlite"
    else:
        raise CliError("no database: pass --db PATH|DSN or --config FILE", 2)
    if not create and not is_dsn(db) and db != ":memory:" and not Path(db).exists():
        raise CliError(f"database {db} does not exist (run `trio-triggers run` first)", 2)
    return db


def _stale_after_ms(loaded: LoadedConfig | None) -> int:
    if loaded is None or loaded.config.runner.lease_stale_after is None:
        return HEARTBEAT_STALE_AFTER_MS
    return max(1, round(loaded.config.runner.lease_stale_after * 1000))


def _run_async(fn: Callable[[], Awaitable[int]], db: str | None = None) -> int:
    try:
        return trio.run(fn)
    except (TriggerError, RunStoreError) as exc:
        unreachable = _unreachable_postgres(db, exc) or _read_only_sqlite(db, exc)
        if unreachable is not None:
            raise CliError(unreachable, 1) from exc
        code = getattr(exc, "code", "error")
        message = getattr(exc, "message", str(exc))
        raise CliError(f"{code}: {message}", 1) from exc


_CONNECT_PROBLEMS = (
    ("connection refused", "connection refused"),
    ("could not translate host name", "unknown host"),
    ("name or service not known", "unknown host"),
    ("timeout expired", "connection timed out"),
    ("no route to host", "no route to host"),
    ("network is unreachable", "network is unreachable"),
    ("password authentication failed", "password authentication failed"),
)


def _read_only_sqlite(db: str | None, exc: BaseException) -> str | None:
    """Why a SQLite database could not be opened for lack of write access, or ``None``.

    Every command opens SQLite read-write, reading included: WAL mode keeps ``-wal`` and
    ``-shm`` files beside the database, and opening checks (and may apply) the schema. So a
    database in a read-only directory, or a read-only file, cannot be read in place."""
    if db is None or is_dsn(db) or db == ":memory:":
        return None
    text = str(exc).lower()
    if "readonly" not in text and "read-only" not in text and "unable to open" not in text:
        return None
    path = Path(db)
    directory = path.parent if str(path.parent) else Path(".")
    why = [
        *(["the file is not writable"] if path.exists() and not os.access(path, os.W_OK) else []),
        *(["its directory is read-only"] if not os.access(directory, os.W_OK) else []),
    ]
    if not why:
        return None
    return (
        f"--db: cannot open {db}: {' and '.join(why)}; SQLite is opened read-write even to "
        f"read (its -wal and -shm files live beside it), so copy {path.name} to a writable "
        "directory and pass that copy as --db"
    )


def _unreachable_postgres(db: str | None, exc: BaseException) -> str | None:
    """For a DSN the server of which could not be reached: ``--db: cannot connect to PostgreSQL at
    HOST port PORT (DSN, password masked): connection refused``; else ``None``."""
    if db is None or not is_dsn(db):
        return None
    cause: BaseException | None = exc
    found = None
    while cause is not None and found is None:
        text = str(cause).lower()
        found = next((said for key, said in _CONNECT_PROBLEMS if key in text), None)
        cause = cause.__cause__ or cause.__context__
    if found is None:
        return None
    parts = urllib.parse.urlsplit(db)
    try:
        port = parts.port or 5432
    except ValueError:
        port = 5432
    host = parts.hostname or "localhost"
    return f"--db: cannot connect to PostgreSQL at {host} port {port} ({shown_db(db)}): {found}"


def dispatch(args: argparse.Namespace) -> int:
    command: str = args.command
    if command == "demo":
        from ._demo import run_demo

        return run_demo(json_output=args.json)
    if command == "run":
        if args.config is None:
            raise CliError("run: --config FILE is required (the triggers to serve)", 2)
        config = load_config(args.config)
        db = _resolve_db(args, config, create=True)
        duration = None
        if args.duration is not None:
            try:
                duration = parse_duration(args.duration)
            except ValueError as exc:
                raise CliError(f"--for: {exc}", 2) from None
        return _run_async(partial(_run, args, config, db, duration), db)
    loaded = load_config(args.config, import_flows=False) if args.config else None
    return _dispatch_store_command(args, loaded)


def _dispatch_store_command(args: argparse.Namespace, loaded: LoadedConfig | None) -> int:
    command: str = args.command
    if command == "add":
        trigger = _trigger_from_flags(args, loaded)
        db = _resolve_db(args, loaded, create=True)
        return _run_async(partial(_add, args, loaded, db, trigger), db)
    db = _resolve_db(args, loaded, create=False)
    handlers: dict[str, Callable[[argparse.Namespace, LoadedConfig | None, str], Any]] = {
        "list": _list,
        "history": _history,
        "show": _show,
        "runs": _runs,
        "cancel": _cancel,
        "next": _next,
        "remove": partial(_set_enabled, enabled=False, remove=True),
        "enable": partial(_set_enabled, enabled=True, remove=False),
        "disable": partial(_set_enabled, enabled=False, remove=False),
        "pause": _pause,
        "resume": _resume,
        "fire": _fire,
        "backfill": _backfill,
        "prune": _prune,
    }
    if command == "history" and args.limit < 1:
        raise CliError("--limit must be a positive integer", 2)
    if command == "history":
        _check_follow_flags(args)
    if command == "fire":
        args.input_value = _json_flag("--input", args.input)
    if command == "next" and args.n < 1:
        raise CliError("-n must be a positive integer", 2)
    if command == "prune":
        try:
            args.older_than_s = parse_duration(args.older_than)
        except ValueError as exc:
            raise CliError(f"--older-than: {exc}", 2) from None
    handler = handlers[command]
    return _run_async(partial(handler, args, loaded, db), db)


def _check_follow_flags(args: argparse.Namespace) -> None:
    """``--interval`` and ``--window`` mean something only with ``--follow``; both positive."""
    for flag, text in (("--interval", args.interval), ("--window", args.window)):
        if text is None:
            continue
        if not args.follow:
            raise CliError(f"{flag} needs --follow", 2)
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            raise CliError(f"{flag}: {exc}", 2) from None
        setattr(args, f"{flag[2:]}_s", seconds)


# --- run ---------------------------------------------------------------------------------


def build_flows(loaded: LoadedConfig) -> dict[str, FlowFn]:
    """The runner's flows: imported Python callables and command flows."""
    flows: dict[str, FlowFn] = {}
    for flow_id, flow in loaded.config.flows.items():
        if flow.command is not None:
            cwd = loaded.directory / flow.cwd if flow.cwd else loaded.directory
            flows[flow_id] = CommandFlow(flow.command, timeout=flow.timeout, env=flow.env, cwd=cwd)
        else:
            flows[flow_id] = loaded.python_flows[flow_id]
    return flows


def register_flows(runner: LocalRunner, loaded: LoadedConfig, flows: dict[str, FlowFn]) -> None:
    """Register ``flows`` with their retry policies and timeouts. A command flow keeps its
    timeout itself (it ends the process group and says the command timed out), so the runner
    bounds only Python flows."""
    for flow_id, fn in flows.items():
        declared = loaded.config.flows[flow_id]
        runner.register(
            flow_id,
            fn,
            retry=loaded.retry_policies.get(flow_id),
            timeout=declared.timeout if declared.command is None else None,
        )


async def sync_triggers(
    store: TriggerStore, triggers: list[Trigger]
) -> tuple[list[str], list[Listed]]:
    """Register every declared trigger that is new or differs from its stored declaration.

    Answers the ids registered or updated, and the store's rows as they were before (what
    ``run`` checks the triggers the config does not declare against: the sync leaves those
    alone, so one listing serves both). On a store with ``register_many`` (every built-in
    store) the whole config goes in one transaction, which leaves unchanged declarations
    alone: a 100 000-trigger config starts in seconds, and re-applying it never bumps a
    revision.
    """
    rows = list(await store.list())
    before = {listed.trigger_id: listed.trigger for listed in rows}
    changed = [
        trigger.id
        for trigger in triggers
        if (stored := before.get(trigger.id)) is None or stored.declaration != trigger
    ]
    wanted = set(changed)
    todo = [trigger for trigger in triggers if trigger.id in wanted]
    many = getattr(store, "register_many", None)
    if many is not None:
        if todo:
            await many(todo)
        return changed, rows
    for trigger in todo:
        await store.register(trigger)
    return changed, rows


def _event_line(record: FireRecord, now_ms: int, owner: str | None = None) -> str:
    clock = format_instant(now_ms)[11:19]
    parts = [
        clock,
        f"{record.trigger_id:<16}",
        iso(record.occurrence),
        f"{record.outcome or '':<10}",
    ]
    if record.run_id:
        parts.append(record.run_id)
    if owner:
        parts.append(f"by {owner}")
    if record.error:
        parts.append(f"error: {record.error}")
    return "  ".join(parts)


class _EventPrinter:
    """Prints each new ledger outcome once, naming the process that owns the run (several
    processes may serve one database); ``poll`` is called on a timer and once more at the
    stop, so the last boundary's launches before ``--for`` ends are printed too."""

    def __init__(
        self,
        store: TriggerStore,
        runs: RunStore,
        clock: WallClock,
        *,
        json_output: bool,
        counters: dict[str, int],
        me: OwnerId,
    ) -> None:
        self.me = me
        self.mine: set[str] = set()
        """The runs this process's runner started (see :func:`_noting_runs`)."""
        self.store = store
        self.runs = runs
        self.clock = clock
        self.json_output = json_output
        self.counters = counters
        self.seen: dict[tuple[str, int], str | None] = {}
        self.first = True
        self.owners: dict[str, OwnerId | None] = {}
        self.out: TextIO = sys.stdout
        """Where the events go: the CLI's own stdout (see :func:`_cli_stdout`)."""
        self.pipe_closed = False
        """Set when the reader of ``out`` went away (``run --json | head``)."""

    async def _owner(self, run_id: str | None) -> OwnerId | None:
        if run_id is None or is_reservation(run_id):
            return None
        if self.owners.get(run_id) is None:
            try:
                row = await self.runs.get(run_id)
            except RunStoreError:
                row = None  # pruned, or not written yet: ask again at its next outcome
            found = None if row is None else row.owner or row.claim
            if found is None and run_id in self.mine:
                found = self.me  # ended (and released) before this poll saw it
            self.owners[run_id] = found
        return self.owners[run_id]

    async def run(self, stop: trio.CancelScope) -> None:
        """Print events until cancelled; a closed pipe stops the whole ``run`` (``stop``)
        quietly, as Ctrl-C would: nobody is left to read what it would print."""
        while not self.pipe_closed:
            await self.poll()
            await trio.sleep(EVENT_POLL_S)
        stop.cancel()

    async def poll(self) -> None:
        if self.pipe_closed:
            return
        try:
            await self._poll()
        except BrokenPipeError:
            self.pipe_closed = True

    async def _poll(self) -> None:
        try:
            page = await self.store.history(HistoryQuery(limit=100))
        except TriggerError as exc:
            logger.warning("could not read the fire ledger", extra={"error": str(exc)})
            return
        for record in reversed(page.items):
            key = (record.trigger_id, record.occurrence)
            if key in self.seen and self.seen[key] == record.outcome:
                continue
            self.seen[key] = record.outcome
            if self.first or record.outcome is None:
                continue
            self.counters[record.outcome] = self.counters.get(record.outcome, 0) + 1
            owner = await self._owner(record.run_id)
            if self.json_output:
                print_json(
                    out=self.out,
                    value={
                        "event": "fire",
                        "trigger_id": record.trigger_id,
                        "occurrence": record.occurrence,
                        "occurrence_iso": iso(record.occurrence),
                        "outcome": record.outcome,
                        "run_id": record.run_id,
                        "error": record.error,
                        "owner": None
                        if owner is None
                        else {"host_id": owner.host_id, "pid": owner.pid},
                    },
                )
            else:
                label = None if owner is None else f"{owner.host_id}:{owner.pid}"
                print(_event_line(record, self.clock.now_ms(), label), file=self.out)
        self.out.flush()
        self.first = False


def _noting_runs(flows: dict[str, FlowFn], mine: set[str]) -> dict[str, FlowFn]:
    """The flows, each adding its run id to ``mine`` as it starts (so events of this process's
    runs name it even when the run ended, and its owner was released, before a poll)."""

    def noting(flow: FlowFn) -> FlowFn:
        async def run_noted(input: Any, run: RunContext) -> Any:
            mine.add(run.run_id)
            return await flow(input, run)

        return run_noted

    return {flow_id: noting(flow) for flow_id, flow in flows.items()}


async def _status_lines(counters: dict[str, int], running: Callable[[], int]) -> None:
    while True:
        await trio.sleep(STATUS_EVERY_S)
        summary = ", ".join(
            f"{counters.get(k, 0)} {k}" for k in ("launched", "completed", "failed")
        )
        print(
            f"-- status: {summary}, {counters.get('skipped', 0)} skipped; {running()} running now",
            file=sys.stderr,
            flush=True,
        )


PIPE_CLOSED_STATUS = 141
"""``run``'s exit status when its stdout's reader went away: 128 + SIGPIPE, what a shell
reports for a process a closed pipe stops (``yes | head``)."""


@contextlib.contextmanager
def _cli_stdout() -> Iterator[TextIO]:
    """Yield the stream for ``run``'s own output, and send everything else written to stdout
    meanwhile (a Python flow's ``print``, a child process inheriting fd 1) to stderr, so the
    event stream stays parseable whatever flows print and a flow never meets a closed pipe."""
    sys.stdout.flush()
    try:
        out_fd, err_fd = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # not file-backed (captured in-process)
        events = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            yield events
        return
    saved = os.dup(out_fd)
    events = os.fdopen(os.dup(out_fd), "w", encoding="utf-8", errors="replace")
    try:
        os.dup2(err_fd, out_fd)
        yield events
    finally:
        with contextlib.suppress(OSError):
            sys.stdout.flush()  # a flow's last line, to stderr
        with contextlib.suppress(OSError):
            events.close()  # closes even when its flush meets a closed pipe
        os.dup2(saved, out_fd)
        os.close(saved)


async def _run(
    args: argparse.Namespace, loaded: LoadedConfig, db: str, duration: float | None
) -> int:
    with _cli_stdout() as events:
        return await _serve(args, loaded, db, duration, events)


async def _serve(
    args: argparse.Namespace,
    loaded: LoadedConfig,
    db: str,
    duration: float | None,
    events: TextIO,
) -> int:
    clock = SystemWallClock()
    mine: set[str] = set()
    flows = _noting_runs(build_flows(loaded), mine)
    runner_cfg = loaded.config.runner
    sched = loaded.config.scheduler
    options = SchedulerOptions(
        poll_interval=sched.poll_interval,
        run_poll_interval=sched.run_poll_interval,
        concurrency=sched.concurrency,
        start_timeout=sched.start_timeout,
        inspect_timeout=sched.inspect_timeout,
        cancel_timeout=sched.cancel_timeout,
        fire_retention=sched.fire_retention_days * 86_400,
        host=sched.host,
    )
    owner = OwnerId.for_this_process(runner_cfg.host_id)
    counters: dict[str, int] = {}
    async with open_stores(db, clock=clock, stale_after_ms=_stale_after_ms(loaded)) as (
        trigger_store,
        run_store,
    ):
        changed, stored = await sync_triggers(trigger_store, loaded.triggers)
        declared = {t.id for t in loaded.triggers}
        for row in stored:
            trigger = row.trigger
            if (
                row.trigger_id not in declared
                and trigger is not None
                and trigger.enabled
                and trigger.flow_id not in flows
            ):
                logger.warning(
                    "trigger %s (added with `trio-triggers add`) names flow %s, which this "
                    "config does not declare; its runs will fail",
                    row.trigger_id,
                    trigger.flow_id,
                )
        async with (
            open_local_runner(
                run_store,
                None,
                clock=clock,
                owner=owner,
                concurrency=runner_cfg.concurrency,
                poll_interval=runner_cfg.poll_interval,
                cancel_poll_interval=min(1.0, runner_cfg.poll_interval),
            ) as runner,
            open_scheduler(trigger_store, runner, options=options, clock=clock) as sch,
            trio.open_nursery() as nursery,
        ):
            register_flows(runner, loaded, flows)
            await nursery.start(sch.serve)
            enabled = sum(1 for t in loaded.triggers if t.enabled)
            until = f" for {args.duration}" if duration is not None else ""
            print(
                f"-- serving {enabled} trigger(s) from {loaded.path} on {shown_db(db)}{until}"
                f" ({len(changed)} registered or updated); Ctrl-C stops",
                file=sys.stderr,
                flush=True,
            )
            printer = _EventPrinter(
                trigger_store, run_store, clock, json_output=args.json, counters=counters, me=owner
            )
            printer.mine = mine
            printer.out = events
            if not args.quiet:
                nursery.start_soon(printer.run, nursery.cancel_scope)
                nursery.start_soon(_status_lines, counters, lambda: len(runner.running))
            nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
            try:
                if duration is not None:
                    await trio.sleep(duration)
                    nursery.cancel_scope.cancel()
                else:
                    await trio.sleep_forever()
            finally:
                handed_back = len(runner.running)
        if not args.quiet:
            # The outcomes written since the last poll (the last boundary's launches).
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await printer.poll()
    if not args.quiet and printer.pipe_closed:
        print("-- stdout was closed: stopped", file=sys.stderr)
        return PIPE_CLOSED_STATUS
    if handed_back:
        print(
            f"-- stopped; {handed_back} running flow(s) were handed back for the next start",
            file=sys.stderr,
        )
    else:
        print("-- stopped", file=sys.stderr)
    return 0


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            print(
                f"-- {signal.Signals(signum).name}: stopping cleanly", file=sys.stderr, flush=True
            )
            scope.cancel()
            return


# --- reading commands ------------------------------------------------------------------


def _policies(overlap: str, catch_up: str, max_catch_up: int) -> str:
    text = f"{overlap}/{catch_up}"
    if catch_up != "none":
        text += f"({max_catch_up})"
    return text


async def _list(args: argparse.Namespace, loaded: LoadedConfig | None, db: str) -> int:
    clock = SystemWallClock()
    async with open_stores(db, clock=clock) as (store, _runs):
        rows = await summaries(store, clock)
    if args.json:
        print_json(rows)
        return 0
    now = clock.now_ms()
    when = partial(_when, utc=args.utc)
    if args.wide:
        headers = ["ID", "FLOW", "CRON", "TIMEZONE", "POLICIES", "STATE", "LAST FIRED"]
        headers += ["PENDING", "ACTIVE RUN", "NEXT", "MISSED"]
        table = [
            [
                s.trigger_id,
                s.flow_id,
                s.cron,
                s.timezone or "(local)",
                _policies(s.overlap, s.catch_up, s.max_catch_up),
                _state(s),
                when(s.last_fired_at),
                when(s.pending_at),
                s.active_run_id or "-",
                f"{when(s.next_occurrences[0])} ({relative(s.next_occurrences[0], now)})"
                if s.next_occurrences
                else "-",
                _missed(s.missed),
            ]
            for s in rows
        ]
    else:
        headers = ["ID", "FLOW", "CRON", "TIMEZONE", "STATE", "NEXT"]
        table = [
            [
                _fit(s.trigger_id, 18),
                _fit(s.flow_id, 12),
                _fit(s.cron, 15),
                _fit(s.timezone or "(local)", 14),
                _state(s),
                when(s.next_occurrences[0]) if s.next_occurrences else "-",
            ]
            for s in rows
        ]
    print(render_table(headers, table) if table else "no triggers")
    for s in rows:
        if s.paused is not None:
            print(f"paused {s.trigger_id} {_pause_text(s.paused, utc=args.utc)}")
        line = None if s.backfill is None else backfill_line(s.trigger_id, s.backfill, utc=args.utc)
        if line is not None:
            print(line)
    return 0


def _missed(missed: MissedCounts) -> str:
    """``list --wide``'s MISSED cell: the total and its non-zero reasons, or ``0``."""
    total = missed.total
    if not total:
        return "0"
    reasons = ", ".join(f"{reason} {count}" for reason, count in missed.by_reason() if count)
    return f"{total} ({reasons})"


def _state(summary: TriggerSummary) -> str:
    """``enabled``, ``disabled`` or ``removed`` (disabled by ``remove``), with ``paused``."""
    if summary.enabled:
        state = "enabled"
    elif summary.removed_at is not None:
        state = "removed"
    else:
        state = "disabled"
    return (
        "paused"
        if summary.paused is not None and summary.enabled
        else (f"{state}+paused" if summary.paused is not None else state)
    )


LIST_WIDTH = 100
"""``list`` fits this many columns by default (cells cut with ``…``; ``--wide`` shows all)."""


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _when(ms: int | None, *, utc: bool) -> str:
    """An instant in the host's local time with its zone (``2026-03-10 03:00:00 CET``), or
    in UTC with a ``Z`` under ``--utc``; ``-`` for ``None``."""
    if ms is None:
        return "-"
    return format_instant(ms) if utc else format_local(ms, None)


async def _history(args: argparse.Namespace, loaded: LoadedConfig | None, db: str) -> int:
    if args.follow:
        from ._follow import follow

        return await follow(args, db)
    clock = SystemWallClock()
    query = HistoryQuery(trigger_id=args.trigger, outcome=args.outcome, limit=args.limit)
    async with open_stores(db, clock=clock) as (store, runs):
        page = await fires(store, query)
        run_errors = await run_errors_of(runs, page.items)
    if args.json:
        print_json([history_json(r, run_errors) for r in page.items])
        return 0
    now = clock.now_ms()
    table = [history_cells(r, now, run_errors, utc=args.utc) for r in page.items]
    headers = ["OCCURRENCE", "WHEN", "TRIGGER", "OUTCOME", "RUN", "ERROR"]
    print(render_table(headers, table) if table else "no fires recorded")
    return 0


def history_json(record: FireRecord, run_errors: dict[str, str]) -> dict[str, Any]:
    """One ledger row as ``history --json`` prints it (and ``history --follow --json``)."""
    return {
        "trigger_id": record.trigger_id,
        "occurrence": record.occurrence,
        "occurrence_iso": iso(record.occurrence),
        "outcome": record.outcome,
        "run_id": record.run_id,
        "error": record.error,
        "run_error": run_errors.get(record.run_id or ""),
        "manual_key": record.manual_key,
    }


def history_cells(
    record: FireRecord, now_ms: int, run_errors: dict[str, str], *, utc: bool
) -> list[str]:
    """One ledger row as the cells of ``history``'s table (``--follow`` prints them as a line)."""
    return [
        _when(record.occurrence, utc=utc),
        relative(record.occurrence, now_ms),
        record.trigger_id,
        (record.outcome or "(claimed)") + (" (manual)" if record.manual_key else ""),
        record.run_id or "-",
        _with_run_error(record.error, run_errors.get(record.run_id or ""))[:80],
    ]


def _with_run_error(ledger: str | None, run_error: str | None) -> str:
    """The ledger's message, then the flow's own error when the run store has it."""
    if run_error is None:
        return ledger or ""
    return f"{ledger}: {run_error}" if ledger else run_error


async def run_errors_of(runs: RunStore, records: list[FireRecord]) -> dict[str, str]:
    """The flows' own errors of the failed runs among ``records`` (the ledger says only that a
    run failed; the run store says why)."""
    errors: dict[str, str] = {}
    for record in records:
        run_id = record.run_id
        if record.outcome != "failed" or run_id is None or is_reservation(run_id):
            continue
        try:
            row = await runs.get(run_id)
        except RunStoreError:
            continue  # a run of another runner, or pruned: the ledger's message stands alone
        if row.error:
            tried = row.attempt
            errors[run_id] = row.error + (f" (after {tried} attempts)" if tried > 1 else "")
    return errors


async def _show(args: argparse.Namespace, loaded: LoadedConfig | None, db: str) -> int:
    clock = SystemWallClock()
    async with open_stores(db, clock=clock) as (store, runs):
        try:
            row = await runs.get(args.run_id)
        except RunStoreError as exc:
            if exc.code in ("not_found_row", "invalid_run"):
                raise CliError(f"unknown run {args.run_id}", 1) from None
            raise
        report = RunReport.of(row)
        manual_key = await _manual_key_of(store, report)
    if args.json:
        value = msgspec.to_builtins(report)
        if manual_key is not None:  # a manual fire's run (a boundary's prints the report alone)
            value["manual_key"] = manual_key
        print_json(value)
        return 0

    def when(ms: int | None) -> str:
        return "-" if ms is None else format_instant(ms)

    owner = report.owner
    fields = [
        ("run", report.run_id),
        ("status", report.status),
        ("flow", report.flow_id or "-"),
        ("trigger", report.trigger_id or "-"),
        ("occurrence", when(report.occurrence)),
        *([("fired", f"by hand (manual, key {manual_key})")] if manual_key else []),
        ("created", when(report.created_at)),
        ("started", when(report.started_at)),
        ("finished", when(report.finished_at)),
        ("owner", "-" if owner is None else f"{owner.host_id} pid {owner.pid}"),
        ("attempts", str(report.attempts)),
        *_retry_fields(report),
        ("input", msgspec.json.encode(report.input).decode()),
        ("result", "-" if report.result is None else msgspec.json.encode(report.result).decode()),
        ("error", report.error or "-"),
    ]
    output = report.output
    if output is not None:
        fields.append(("output", f"stdout {output.stdout_bytes} B, stderr {output.stderr_bytes} B"))
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name.ljust(width)}  {value}")
    for tried in report.attempt_log:
        _print_attempt(tried)
    if output is not None:
        _print_stream("stdout", output.stdout, output.stdout_bytes)
        _print_stream("stderr", output.stderr, output.stderr_bytes)
    return 0


def _retry_fields(report: RunReport) -> list[tuple[str, str]]:
    """``show``'s retry fields, for a run whose flow retried it: which attempt it is on (the
    ``attempts`` field counts executions, a takeover after a crash included) and, while it
    waits, when the next attempt may begin."""
    fields: list[tuple[str, str]] = []
    if report.attempt_log:
        fields.append(("attempt", f"{report.attempt} ({len(report.attempt_log)} retried)"))
    if report.retry_at is not None:
        fields.append(("next attempt", format_instant(report.retry_at)))
    return fields


def _print_attempt(tried: AttemptRecord) -> None:
    """One retried attempt: when it ran, its error, and the last lines it printed."""
    print(
        f"-- attempt {tried.attempt}: {format_instant(tried.started_at_ms)} to "
        f"{format_instant(tried.ended_at_ms)}, failed: {tried.error}"
    )
    output = tried.output
    if output is None:
        return
    for name, text in (("stdout", output.stdout), ("stderr", output.stderr)):
        lines = text.rstrip("\n").splitlines()[-5:]
        for line in lines:
            print(f"   {name}: {line}")


async def _manual_key_of(store: TriggerStore, report: RunReport) -> str | None:
    """The key of the manual fire ``report``'s run is for, ``None`` for a boundary's run."""
    trigger_id, occurrence = report.trigger_id, report.occurrence
    if trigger_id is None or occurrence is None:
        return None
    page = await store.history(
        HistoryQuery(
            trigger_id=trigger_id,
            cursor=Fire(trigger_id=trigger_id, occurrence=occurrence + 1),
            limit=1,
        )
    )
    rows = [r for r in page.items if r.occurrence == occurrence]
    return rows[0].manual_key if rows else None


def _print_stream(name: str, text: str, size: int) -> None:
    """One recorded stream under a header that says whether its head was dropped."""
    if not size:
        return
    kept = len(text.encode("utf-8", "replace"))
    cut = f", its last {kept} B shown" if size > OUTPUT_TAIL_BYTES else ""
    print(f"--- {name} ({size} B{cut}) ---")
    print(text, end="" if text.endswith("\n") else "\n")


_ENDED = frozenset(("completed", "failed", "cancelled"))


async def _cancel(args: argparse.Namespace, loaded: LoadedConfig | None, db: str) -> int:
    """``cancel RUN_ID``: write the request; the run's owner, wherever it runs, acts on it.

    Exit 0 when the request is recorded and when the run had already ended (its status is
    printed and nothing is written: cancelling is idempotent, so a script may repeat it);
    exit 1 for an unknown run id."""
    clock = SystemWallClock()
    async with open_stores(db, clock=clock) as (_store, runs):
        try:
            report = await cancel_run(runs, args.run_id, clock)
        except RunStoreError as exc:
            if exc.code in ("not_found_row", "invalid_run"):
                raise CliError(f"unknown run {args.run_id}", 1) from None
            raise
    ended = report.status in _ENDED
    if args.json:
        value = msgspec.to_builtins(report)
        value["cancel"] = "already_ended" if ended else "requested"
        print_json(value)
        return 0
    if ended:
        print(f"run {report.run_id} already ended: {report.status}; nothing changed")
    elif report.status == "running":
        print(
            f"cancel requested for run {report.run_id} (running): its owner stops it within "
            "one heartbeat interval and records it cancelled"
        )
    else:
        print(
            f"cancel requested for run {report.run_id} ({report.status}, no worker is "
            "running it): the first runner to pick it up records it cancelled without running it"
        )
    return 0


async def _runs(args: argparse.Namespace, loaded: LoadedConfig | None, db: str) -> int:
    if args.limit < 1:
        raise CliError("--limit: must be a positive number of runs", 2)
    clock = SystemWallClock()
    async with open_stores(db, clock=clock) as (_store, runs):
        if not isinstance(runs, RunStoreBase):
            raise CliError(f"{shown_db(db)}: this run store cannot list runs", 1)
        rows = await runs.list_runs(
            statuses=args.state, limit=args.limit, newest_first=True, trigger_id=args.trigger
        )
    reports = [RunReport.of(row) for row in rows]
    if args.json:
        print_json(reports)
        return 0
    if not reports:
        print("no runs recorded")
        return 0

    def when(ms: int | None) -> str:
        return "-" if ms is None else _when(ms, utc=args.utc)

    table = [
        [
            r.run_id,
            r.status,
            r.trigger_id or "-",
            when(r.occurrence),
            when(r.started_at),
            when(r.finished_at),
            (r.error or "")[:60],
        ]
        for r in reports
    ]
    headers = ["RUN", "STATUS", "TRIGGER", "OCCURRENCE", "STARTED", "FINISHED", "ERROR"]
    print(render_table(headers, table))
    return 0


async def _next(args: argparse.Namespace, loaded: LoadedConfig | None, db: str) -> int:
    clock = SystemWallClock()
    async with open_stores(db, clock=clock) as (store, _runs):
        trigger = await store.get(args.trigger_id)
    if trigger is None:
        raise CliError(f"unknown trigger {args.trigger_id}", 1)
    now = clock.now_ms()
    # The next boundaries still to launch: within the window, with their jittered launch
    # instants (docs/declarations.md, "Jitter, windows and pausing after failures").
    found = next_launches(trigger, now, args.n)
    jittered = trigger.jitter_ms > 0
    if args.json:
        rows: list[dict[str, object]] = []
        for occurrence, launch in found:
            row: dict[str, object] = {"occurrence": occurrence, "occurrence_iso": iso(occurrence)}
            if jittered:
                row["launch_at"] = launch
                row["launch_at_iso"] = iso(launch)
            rows.append(row)
        print_json(rows)
        return 0
    for occurrence, launch in found:
        line = f"{format_instant(occurrence)}{_local_part(occurrence, trigger.timezone)}"
        if jittered:
            line += f"   launches {_launch_text(occurrence, launch)}"
        print(line)
    return 0


def _launch_text(occurrence: int, launch: int) -> str:
    """``2026-03-10 02:00:04.250Z (+4.25 s)``: a jittered launch and its delay."""
    seconds, millis = divmod(launch, 1000)
    text = format_instant(seconds * 1000).removesuffix("Z") + f".{millis:03d}Z"
    delay = (launch - occurrence) / 1000
    return f"{text} (+{delay:g} s)"


def _with_relative(ms: int, now_ms: int) -> str:
    """``2026-03-10 02:00:00Z (in 3 minutes)``: the exact instant and how far it is."""
    return f"{format_instant(ms)} ({relative(ms, now_ms)})"


def _local_part(ms: int, timezone: str | None) -> str:
    """The trigger's own wall time with its zone, when it has one (`next`'s second column)."""
    if timezone is None:
        return ""
    try:
        return f"   ({format_local(ms, timezone)})"
    except ValueError:
        return ""


# --- writing commands ------------------------------------------------------------------


#: The declaration fields ``add`` takes from ``--jitter``, ``--start-at``, ``--end-at`` and
#: ``--pause-after-failures``, with how each flag's text is read. Text a converter cannot read
#: is passed on as text, so the declaration's own check refuses it with the same code as any
#: other bad value of that field.
_OPTIONAL_KEY_FLAGS: dict[str, Callable[[str], object]] = {
    "jitter": float,
    "start_at": str,
    "end_at": str,
    "pause_after_failures": int,
}


def _optional_keys(args: argparse.Namespace) -> dict[str, object]:
    """The declaration fields that ``add``'s optional-key flags give (absent flags: none)."""
    fields: dict[str, object] = {}
    for field, convert in _OPTIONAL_KEY_FLAGS.items():
        text: str | None = getattr(args, field)
        if text is None:
            continue
        try:
            fields[field] = convert(text.strip())
        except ValueError:
            fields[field] = text
    return fields


def _trigger_from_flags(args: argparse.Namespace, loaded: LoadedConfig | None) -> Trigger:
    try:
        input_value = msgspec.json.decode(args.input)
    except msgspec.DecodeError as exc:
        raise CliError(f"--input is not JSON: {exc}", 2) from None
    if loaded is not None and args.flow not in loaded.config.flows:
        raise CliError(
            f"--flow: {loaded.path} declares no flow {args.flow!r} "
            f"(declared: {', '.join(sorted(loaded.config.flows)) or 'none'})",
            2,
        )
    try:
        return Trigger.make(
            {
                "id": args.id,
                "flow_id": args.flow,
                "input": input_value,
                "cron": args.cron,
                "timezone": args.timezone,
                "overlap": args.overlap,
                "catch_up": args.catch_up,
                "max_catch_up": args.max_catch_up,
                "enabled": not args.disabled,
                **_optional_keys(args),
            }
        )
    except TriggerError as exc:
        field, message = explain_trigger_error(exc, args.cron, args.timezone)
        where = {"flow_id": "--flow", "timezone": "--tz"}.get(field, f"--{field.replace('_', '-')}")
        raise CliError(f"{where}: {exc.code}: {message}", 2) from None


def _changes(before: Trigger, after: Trigger) -> list[str]:
    """``field: old -> new`` for each declared field that differs (JSON for the input)."""
    lines: list[str] = []
    for name in before.__struct_fields__:
        old, new = getattr(before, name), getattr(after, name)
        if old != new:
            shown = [msgspec.json.encode(v).decode() for v in (old, new)]
            lines.append(f"{name}: {shown[0]} -> {shown[1]}")
    return lines


async def _add(
    args: argparse.Namespace, loaded: LoadedConfig | None, db: str, trigger: Trigger
) -> int:
    clock = SystemWallClock()
    async with open_stores(db, clock=clock) as (store, _runs):
        existing = await store.get(trigger.id)
        changes = [] if existing is None else _changes(existing.declaration, trigger)
        if existing is not None and not changes:
            registered = existing  # the same declaration: nothing to write, nothing to refuse
        elif existing is not None and not args.replace:
            listed = "".join(f"\n  {line}" for line in changes)
            raise CliError(
                f"--id: trigger {trigger.id!r} is already registered (revision "
                f"{existing.revision}); pass --replace to change:{listed}",
                2,
            )
        else:
            registered = await store.register(trigger)
    if args.json:
        print_json(registered)
    elif existing is None:
        print(f"registered {registered.id} (revision {registered.revision}) in {shown_db(db)}")
    elif not changes:
        print(f"{registered.id} is already registered as given (revision {registered.revision})")
    else:
        print(f"replaced {registered.id} (revision {registered.revision}) in {shown_db(db)}:")
        for line in changes:
            print(f"  {line}")
    return 0


async def _set_enabled(
    args: argparse.Namespace,
    loaded: LoadedConfig | None,
    db: str,
    *,
    enabled: bool,
    remove: bool,
) -> int:
    clock = SystemWallClock()
    async with open_stores(db, clock=clock) as (store, _runs):
        existing = await store.get(args.trigger_id)
        if existing is None:
            raise CliError(f"unknown trigger {args.trigger_id}", 1)
        if remove:
            existing = await remove_trigger(store, args.trigger_id)
        elif existing.enabled != enabled:
            existing = await store.register(
                msgspec.structs.replace(existing.declaration, enabled=enabled)
            )
    if args.json:
        print_json(existing)
        return 0
    state = "enabled" if enabled else "disabled"
    if remove:
        print(
            f"removed {args.trigger_id}: it is disabled for good and its history is kept "
            "(the trigger store keeps every registration; see docs/config.md)"
        )
    else:
        print(f"{args.trigger_id} is {state} (revision {existing.revision})")
    if existing.paused is not None and enabled:
        print(f"note: {args.trigger_id} is also paused; `resume` it to fire again")
    _declared_note(loaded, args.trigger_id)
    return 0


def _declared_note(loaded: LoadedConfig | None, trigger_id: str) -> None:
    if loaded is not None and any(t.id == trigger_id for t in loaded.triggers):
        print(
            f"note: {loaded.path} declares {trigger_id}; `trio-triggers run` applies the "
            "file's declaration again at its next start, so edit the file to make this last",
            file=sys.stderr,
        )


async def _pause(args: argparse.Namespace, loaded: LoadedConfig | None, db: str) -> int:
    clock = SystemWallClock()
    async with open_stores(db, clock=clock) as (store, _runs):
        try:
            paused = await pause_trigger(store, args.trigger_id, note=args.note, by=args.by)
        except TriggerError as exc:
            if exc.code == "unknown_trigger":
                raise CliError(f"unknown trigger {args.trigger_id}", 1) from None
            raise
    if args.json:
        print_json(paused)
        return 0
    pause = paused.paused
    assert pause is not None
    print(f"{paused.id} is paused {_pause_text(pause, utc=False)}")
    print(
        f"nothing new fires until `trio-triggers resume {paused.id} --from now|policy`; "
        "runs it holds still settle, and the next `run` keeps the pause"
    )
    return 0


def _pause_text(pause: Pause, *, utc: bool) -> str:
    text = f"since {_when(pause.at, utc=utc)}"
    if pause.by:
        text += f" by {pause.by}"
    if pause.note:
        text += f": {pause.note}"
    return text


async def _resume(args: argparse.Namespace, loaded: LoadedConfig | None, db: str) -> int:
    clock = SystemWallClock()
    async with open_stores(db, clock=clock) as (store, _runs):
        try:
            resumed = await resume_trigger(store, args.trigger_id, point=args.point)
        except TriggerError as exc:
            if exc.code == "unknown_trigger":
                raise CliError(f"unknown trigger {args.trigger_id}", 1) from None
            raise
    if args.json:
        print_json(resumed)
        return 0
    trigger = resumed.trigger
    if not resumed.was_paused:
        print(f"{trigger.id} was not paused: nothing changed")
    elif resumed.point == "now":
        count = f"{resumed.skipped}{' or more' if resumed.skipped_more else ''}"
        print(
            f"{trigger.id} resumed from now: {count} boundar{'y' if count == '1' else 'ies'} "
            "that fell due while it was paused skipped (never fired); the next fires as usual"
        )
    else:
        policy = _policies(trigger.overlap, trigger.catch_up, trigger.max_catch_up)
        print(
            f"{trigger.id} resumed under its catch-up policy ({policy}): what fell due while it "
            "was paused is owed as after downtime"
        )
    if not trigger.enabled:
        print(f"note: {trigger.id} is disabled, so nothing fires until it is enabled")
    return 0


# --- fire (run now) ----------------------------------------------------------------------


def _json_flag(flag: str, text: str | None) -> Any:
    """The JSON value of ``flag`` (``msgspec.UNSET`` when absent); bad JSON is a usage error."""
    if text is None:
        return msgspec.UNSET
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise CliError(f"{flag}: not JSON ({exc})", 2) from None


async def _served_elsewhere(input: Any, run: RunContext) -> Any:
    raise AssertionError("fire's runner never serves")  # pragma: no cover


_FIRE_REFUSALS = frozenset(
    ("unknown_trigger", "trigger_disabled", "trigger_paused", "key_conflict", "invalid_options")
)


async def _fire(args: argparse.Namespace, loaded: LoadedConfig | None, db: str) -> int:
    """``fire ID``: a manual fire, launched from this process into the run store.

    This process does not serve: its runner only writes the run's row (``pending``), and the
    serving process's workers execute it while its scheduler's recovery sweep (the rows that
    hold something) adopts the held run and settles its ledger row when it ends. Leaving the
    scheduler block here detaches the launch's monitor without recording anything."""
    clock = SystemWallClock()
    async with open_stores(db, clock=clock) as (store, runs):
        trigger = await store.get(args.trigger_id)
        if trigger is None:
            raise CliError(f"unknown trigger {args.trigger_id}", 1)
        # A runner that never serves: ``start`` writes the run's row and nothing executes here.
        runner = LocalRunner(runs, {trigger.flow_id: _served_elsewhere}, clock=clock)
        async with open_scheduler(store, runner, clock=clock) as scheduler:
            try:
                fired = await scheduler.fire(
                    args.trigger_id,
                    key=args.key,
                    input=args.input_value,
                    overlap=args.overlap,
                    by=args.by or operator_name(),
                )
            except TriggerError as exc:
                if exc.code in _FIRE_REFUSALS:
                    raise CliError(f"{exc.code}: {exc.message}", 1) from None
                raise
    if args.json:
        value = msgspec.to_builtins(fired)
        value["occurrence_iso"] = iso(fired.occurrence)
        print_json(value)
    else:
        print(_fired_text(fired))
    return 1 if fired.outcome == "failed" else 0


def _fired_text(fired: Fired) -> str:
    name, key = fired.trigger_id, fired.key
    at = format_instant(fired.occurrence)
    if fired.repeated:
        return (
            f"key {key} already fired {name} at {at} ({fired.outcome or 'claimed'}"
            f"{', run ' + fired.run_id if fired.run_id else ''}); nothing new runs"
        )
    head = f"{name} fired now at {at} (manual, key {key})"
    if fired.outcome == "launched":
        verb = "superseding the run it held; " if fired.action == "supersede" else ""
        return (
            f"{head}: {verb}run {fired.run_id} started; the serving `trio-triggers run` executes it"
        )
    if fired.outcome == "skipped":
        return f"{head}: skipped, a run of it is in progress (overlap skip); nothing runs"
    if fired.outcome == "buffered":
        return f"{head}: buffered, it runs when the run in progress ends"
    if fired.outcome == "failed":
        return f"{head}: the runner refused to start it"
    return f"{head}: its launch is owed; the serving scheduler starts it"


async def _backfill(args: argparse.Namespace, loaded: LoadedConfig | None, db: str) -> int:
    status, message = await backfill_command(args, loaded, db)
    if message is not None:
        raise CliError(message, status)
    return status


async def _prune(args: argparse.Namespace, loaded: LoadedConfig | None, db: str) -> int:
    clock = SystemWallClock()
    cutoff = clock.now_ms() - math.ceil(args.older_than_s * 1000)
    async with open_stores(db, clock=clock) as (store, _runs):
        deleted = await store.prune_fires(cutoff)
    if args.json:
        print_json({"deleted": deleted, "older_than": cutoff, "older_than_iso": iso(cutoff)})
    else:
        print(f"pruned {deleted} settled fire(s) older than {format_instant(cutoff)}")
    return 0
