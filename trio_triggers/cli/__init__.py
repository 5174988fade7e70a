"""The ``trio-triggers`` command line (``docs/quickstart.md``, ``docs/config.md``).

``main(argv)`` parses the arguments and runs one command inside ``trio.run``; it returns the exit
status (0 success, 1 runtime failure, 2 bad usage or bad config, which writes nothing). The
console script ``trio-triggers = "trio_triggers.cli:main"`` calls it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import TYPE_CHECKING

from ._config import ConfigError, load_config

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = ["build_parser", "load_config", "main"]


def _add_db_args(parser: argparse.ArgumentParser, *, config_required: bool = False) -> None:
    parser.add_argument(
        "--config",
        "-c",
        required=config_required,
        metavar="FILE",
        help="the triggers.toml config file (its database is the default --db)",
    )
    parser.add_argument(
        "--db",
        metavar="PATH|DSN",
        help="SQLite file or postgresql:// DSN (default: trio-triggers.sqlite next to the config)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``trio-triggers`` argument parser, with every subcommand (for ``--help`` and tests)."""
    parser = argparse.ArgumentParser(
        prog="trio-triggers",
        description="Durable cron triggers for Trio: serve a config, inspect and edit triggers.",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log output on stderr"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = commands.add_parser("run", help="register the config's triggers and serve them")
    _add_db_args(run, config_required=True)
    run.add_argument(
        "--for",
        dest="duration",
        metavar="DURATION",
        help="stop by itself after this long (e.g. 60s, 10m); default: until Ctrl-C",
    )
    run.add_argument(
        "--quiet", "-q", action="store_true", help="no event lines on stdout (logs only)"
    )
    run.add_argument("--json", action="store_true", help="events as JSON lines on stdout")

    listing = commands.add_parser("list", help="triggers with their state and next occurrences")
    _add_db_args(listing)
    listing.add_argument("--json", action="store_true", help="machine-readable output")

    history = commands.add_parser("history", help="the fire ledger, newest first")
    _add_db_args(history)
    history.add_argument("--trigger", metavar="ID", help="only this trigger")
    history.add_argument(
        "--outcome",
        choices=["launched", "completed", "skipped", "buffered", "superseded", "failed"],
        help="only this outcome",
    )
    history.add_argument("--limit", type=int, default=20, metavar="N", help="rows (default 20)")
    history.add_argument("--json", action="store_true", help="machine-readable output")

    show = commands.add_parser(
        "show",
        help="one run: state, timings, owner, result and the flow's own error",
        description="Show one run from the run store: its state, the trigger boundary it is "
        "for, timings, owner, input, result and (for a failed run) the flow's own error. "
        "Example: trio-triggers show run-0f3c... --config triggers.toml",
    )
    _add_db_args(show)
    show.add_argument("run_id", metavar="RUN_ID", help="a run id, as history prints it")
    show.add_argument("--json", action="store_true", help="machine-readable output")

    nxt = commands.add_parser("next", help="the next occurrences of one trigger")
    _add_db_args(nxt)
    nxt.add_argument("trigger_id", metavar="ID")
    nxt.add_argument("-n", type=int, default=5, metavar="N", help="how many (default 5)")
    nxt.add_argument("--json", action="store_true", help="machine-readable output")

    add = commands.add_parser("add", help="register a trigger in the database")
    _add_db_args(add)
    add.add_argument("--id", required=True)
    add.add_argument("--flow", required=True, help="flow id (declared in the config's [flows])")
    add.add_argument("--cron", required=True, help="5 or 6 field cron expression")
    add.add_argument("--timezone", "--tz", help="IANA zone or ±HH:MM (default: host zone)")
    add.add_argument("--input", default="{}", help="JSON input (default {})")
    add.add_argument("--overlap", choices=["skip", "buffer-one", "supersede"], default="skip")
    add.add_argument("--catch-up", choices=["none", "one", "all"], default="none")
    add.add_argument("--max-catch-up", type=int, default=0)
    add.add_argument("--disabled", action="store_true", help="register it disabled")
    add.add_argument("--json", action="store_true", help="machine-readable output")

    for name, text in (
        ("remove", "retire a trigger: disable it for good (its history is kept)"),
        ("enable", "enable a trigger"),
        ("disable", "disable a trigger (nothing new fires; active runs are still settled)"),
    ):
        sub = commands.add_parser(name, help=text)
        _add_db_args(sub)
        sub.add_argument("trigger_id", metavar="ID")
        sub.add_argument("--json", action="store_true", help="machine-readable output")

    prune = commands.add_parser("prune", help="delete settled ledger rows older than a duration")
    _add_db_args(prune)
    prune.add_argument("--older-than", required=True, metavar="DURATION", help="e.g. 30d, 12h")
    prune.add_argument("--json", action="store_true", help="machine-readable output")

    demo = commands.add_parser(
        "demo", help="a simulated week of schedules (policies, crash, DST) in seconds"
    )
    demo.add_argument("--json", action="store_true", help="the timeline as JSON lines")
    return parser


_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class _Formatter(logging.Formatter):
    """The library keeps data out of its messages (in ``extra``); show it after the text."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        if extras:
            text += " " + " ".join(f"{k}={v}" for k, v in sorted(extras.items()))
        return text


@contextlib.contextmanager
def _logging_to_stderr(verbose: int) -> Iterator[None]:
    """Send the library's logs to stderr for one command, then restore the logger as it was
    (``main`` is also called in-process, by tests and embedding code)."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("trio_triggers")
    saved = (root.handlers[:], root.level, root.propagate)
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    try:
        yield
    finally:
        root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns (and, as a console script, exits with) the status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from ._commands import CliError, dispatch

    try:
        with _logging_to_stderr(args.verbose):
            return dispatch(args)
    except ConfigError as exc:
        print(f"trio-triggers: error: {exc}", file=sys.stderr)
        return 2
    except CliError as exc:
        print(f"trio-triggers: error: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # stdout closed early (``trio-triggers demo | head``)
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the exit-time flush
        return 1
