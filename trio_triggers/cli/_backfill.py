"""``trio-triggers backfill ID --from T --to T`` (and ``--cancel``), and what ``list`` says of a
running backfill (``docs/operations.md``, "Backfill").

The command only writes the backfill's durable state; the schedulers (``trio-triggers run``, or
any process serving the database) carry it out, one boundary at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._clock import SystemWallClock
from .._databases import open_stores
from .._errors import TriggerError
from .._operations import backfill_trigger, cancel_backfill
from ._output import format_instant, print_json
from ._time import format_local, parse_instant

if TYPE_CHECKING:
    import argparse

    from .._declarations import Backfill
    from ._config import LoadedConfig

__all__ = ["DESCRIPTION", "EXAMPLE", "add_backfill_command", "backfill_command", "backfill_line"]

DESCRIPTION = (
    "Fire a trigger's own boundaries in a past interval [--from, --to], in order, each with "
    "its scheduled idempotency key; a boundary already fired is passed over, never run twice. "
    "The backfill is durable state the schedulers carry out (a crash resumes it) and `list` "
    "shows it while it runs. It covers at most --max boundaries (default 1000, at most "
    "100000), its boundaries are claimed under the trigger's overlap policy unless --overlap "
    "says otherwise (buffer-one runs them one after another), and it waits while the trigger "
    "is paused or disabled."
)
EXAMPLE = "trio-triggers backfill nightly --from 2026-03-01 --to 2026-03-10 --overlap buffer-one"


def add_backfill_command(backfill: argparse.ArgumentParser) -> None:
    """The ``backfill`` subcommand's arguments."""
    backfill.add_argument("trigger_id", metavar="ID", help="the trigger's id, as list prints it")
    backfill.add_argument(
        "--from",
        dest="start",
        metavar="T",
        help="first instant of the interval: ISO 8601 (no offset: UTC), or a duration ago (48h)",
    )
    backfill.add_argument("--to", dest="end", metavar="T", help="last instant (included)")
    backfill.add_argument(
        "--max",
        dest="max_boundaries",
        type=int,
        metavar="N",
        help="refuse an interval of more than N boundaries (default 1000, at most 100000)",
    )
    backfill.add_argument(
        "--overlap",
        choices=["skip", "buffer-one", "supersede"],
        help="the overlap policy of its boundaries (default: the trigger's)",
    )
    backfill.add_argument("--by", help="who started it (default: USER@HOST)")
    backfill.add_argument(
        "--cancel", action="store_true", help="stop the trigger's running backfill instead"
    )
    backfill.add_argument("--json", action="store_true", help="machine-readable output")


class _Refused(Exception):
    """How :func:`backfill_command` reports a refusal: the message and the exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _instants(args: argparse.Namespace, now: int) -> tuple[int, int]:
    if args.start is None or args.end is None:
        raise _Refused("backfill needs --from and --to (or --cancel)", 2)
    try:
        return parse_instant(args.start, now_ms=now), parse_instant(args.end, now_ms=now)
    except ValueError as exc:
        raise _Refused(str(exc), 2) from None


async def backfill_command(
    args: argparse.Namespace, loaded: LoadedConfig | None, db: str
) -> tuple[int, str | None]:
    """Start (or ``--cancel``) a backfill; answers ``(exit status, error message or None)``."""
    del loaded
    clock = SystemWallClock()
    was_running = False
    try:
        if not args.cancel:
            start, end = _instants(args, clock.now_ms())
        async with open_stores(db, clock=clock) as (store, _runs):
            try:
                if args.cancel:
                    previous = await store.get(args.trigger_id)
                    prior = previous.backfill if previous is not None else None
                    was_running = prior is not None and prior.running
                    trigger = await cancel_backfill(store, args.trigger_id)
                else:
                    trigger = await backfill_trigger(
                        store,
                        args.trigger_id,
                        start=start,
                        end=end,
                        max_boundaries=args.max_boundaries,
                        overlap=args.overlap,
                        by=args.by,
                    )
            except TriggerError as exc:
                if exc.code == "unknown_trigger":
                    raise _Refused(f"unknown trigger {args.trigger_id}", 1) from None
                if exc.code == "invalid_options":
                    hint = _flag_of(exc.path)
                    status = 1 if exc.path == "backfill" else 2
                    raise _Refused(f"backfill refused{hint}: {exc.message}", status) from None
                raise
    except _Refused as refused:
        return refused.status, str(refused)
    backfill = trigger.backfill
    if args.json:
        print_json(backfill)
        return 0, None
    if args.cancel:
        if backfill is None or not was_running:
            print(f"{trigger.id} has no running backfill: nothing changed")
        else:
            print(
                f"backfill of {trigger.id} cancelled after {backfill.done} of {backfill.total} "
                "boundaries (what it fired stays fired)"
            )
        return 0, None
    assert backfill is not None
    overlap = backfill.overlap or f"{trigger.overlap}, the trigger's"
    print(
        f"backfill of {trigger.id} started: {backfill.total} boundaries from "
        f"{format_instant(backfill.start)} to {format_instant(backfill.end)} "
        f"(overlap {overlap})"
    )
    print(
        "the schedulers serving this database carry it out one boundary at a time; "
        f"`trio-triggers list` shows its progress, `backfill {trigger.id} --cancel` stops it"
    )
    if (backfill.overlap or trigger.overlap) == "skip" and backfill.total > 1:
        # The default surprises: each boundary falls due at once, so under ``skip`` every one
        # that comes while the previous run still runs is skipped (docs/operations.md).
        print(
            "note: under skip, a boundary that comes while the previous one still runs is "
            "skipped; --overlap buffer-one runs them one after another"
        )
    if not trigger.schedulable:
        print(f"note: {trigger.id} is paused or disabled, so the backfill waits until it is not")
    return 0, None


_FLAGS = {"start": "--from", "end": "--to", "max_boundaries": "--max", "overlap": "--overlap"}


def _flag_of(path: str | None) -> str:
    flag = _FLAGS.get(path or "")
    return f" ({flag})" if flag is not None else ""


def backfill_line(trigger_id: str, backfill: Backfill, *, utc: bool) -> str | None:
    """``list``'s line for a running backfill (``None`` for a finished or cancelled one)."""
    if not backfill.running:
        return None

    def when(ms: int | None) -> str:
        if ms is None:
            return "-"
        return format_instant(ms) if utc else format_local(ms, None)

    line = (
        f"backfill {trigger_id} {backfill.done}/{backfill.total} boundaries done, "
        f"next {when(backfill.next)} (from {when(backfill.start)} to {when(backfill.end)})"
    )
    if backfill.overlap is not None:
        line += f", overlap {backfill.overlap}"
    if backfill.by:
        line += f", by {backfill.by}"
    return line
