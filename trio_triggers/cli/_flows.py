"""Command flows: an argv list run with ``trio.run_process`` for each run.

* the run's input is written to the command's stdin as JSON;
* the environment carries ``TT_RUN_ID``, ``TT_FLOW_ID`` and ``TT_IDEMPOTENCY_KEY`` (the last is
  what a command uses to make its side effects idempotent, see ``docs/process-death.md``);
* exit status 0 completes the run. Its stdout is the result: parsed as JSON when it is JSON,
  otherwise kept as a string (the last 4 000 characters), ``null`` when empty;
* a non-zero status (or death by a signal, or the timeout) fails the run with an error that
  keeps the tail of stderr;
* both streams are read as the command writes them and the last 64 KiB of each
  (``OUTPUT_TAIL_BYTES``) is kept, with each stream's total size, and recorded with the run's
  outcome whatever it is (``RunRow.output_json``, shown by ``trio-triggers show``). Only a tail
  is kept so that a command printing gigabytes costs 128 KiB of memory, not gigabytes; a result
  printed on a stdout longer than 64 KiB is therefore kept as the text of its tail, not parsed.
  Once the command has exited its pipes are read for at most ``DRAIN_GRACE`` (1 s) more: a
  process it left behind that still holds them (``sh -c "daemon &"``) does not keep the run
  from ending;
* the command runs in a session (and process group) of its own, so everything it starts
  belongs to the run. Cancelling the run (a cancel request, a supersede, a lost lease, the
  timeout, Ctrl-C or the CLI's shutdown) ends the whole group: ``SIGTERM`` to every process in
  it, then ``SIGKILL`` to whatever is left after ``kill_grace`` seconds (5 by default).
  Signalling only the command would leave its children running: ``sh -c "work; sleep 37"``
  killed alone leaves the ``sleep`` behind, owned by nobody, after its run has ended.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from .._ownership import OUTPUT_TAIL_BYTES, RunOutput

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .._local_runner import RunContext

__all__ = ["CommandFailed", "CommandFlow"]

STDERR_TAIL = 2_000
STDOUT_TAIL = 4_000
#: Seconds between ``SIGTERM`` and ``SIGKILL`` to a cancelled command's process group.
KILL_GRACE = 5.0
#: Seconds a command's pipes are still read after it exited (see ``CommandFlow.__call__``).
DRAIN_GRACE = 1.0


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    """Send ``signum`` to process group ``pgid``; nothing left in it is not an error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


class CommandFailed(Exception):
    """A command flow exited unsuccessfully; ``str(err)`` carries the stderr tail.

    ``returncode`` is the exit status (negative: killed by that signal; ``None`` when it timed
    out) and ``timed_out`` says the command passed its timeout: what a retry policy's
    ``retry_on`` matches (docs/failures.md).
    """

    def __init__(self, message: str, *, returncode: int | None = None, timed_out: bool = False):
        super().__init__(message)
        self.returncode = returncode
        self.timed_out = timed_out


def _tail(data: bytes, limit: int) -> str:
    text = data.decode("utf-8", "replace")
    if len(text) > limit:
        text = "..." + text[-limit:]
    return text.strip()


class _Tail:
    """The last ``limit`` bytes of a stream, and how many bytes it had in all."""

    __slots__ = ("data", "limit", "total")

    def __init__(self, limit: int = OUTPUT_TAIL_BYTES) -> None:
        self.data = bytearray()
        self.limit = limit
        self.total = 0

    async def drain(self, stream: trio.abc.ReceiveStream) -> None:
        """Read ``stream`` to its end, keeping only the tail."""
        async with stream:
            while chunk := await stream.receive_some(65_536):
                self.total += len(chunk)
                self.data += chunk
                if len(self.data) > self.limit:
                    del self.data[: len(self.data) - self.limit]

    @property
    def complete(self) -> bool:
        return self.total == len(self.data)

    def text(self) -> str:
        return bytes(self.data).decode("utf-8", "replace")


def _output(stdout: _Tail, stderr: _Tail) -> RunOutput:
    return RunOutput(
        stdout=stdout.text(),
        stderr=stderr.text(),
        stdout_bytes=stdout.total,
        stderr_bytes=stderr.total,
    )


class CommandFlow:
    """A flow that runs ``argv`` (see the module docs)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        kill_grace: float = KILL_GRACE,
    ) -> None:
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError("a command is a non-empty list of strings")
        if not kill_grace >= 0:
            raise ValueError("kill_grace must be a non-negative number of seconds")
        self.kill_grace = float(kill_grace)
        self.argv = list(argv)
        self.timeout = timeout
        self.env = dict(env or {})
        self.cwd = Path(cwd) if cwd is not None else None

    def __repr__(self) -> str:
        return f"CommandFlow({self.argv!r})"

    async def _end_group(self, proc: trio.Process) -> None:
        """End a cancelled command and everything it started (its process group)."""
        _signal_group(proc.pid, signal.SIGTERM)
        with trio.move_on_after(self.kill_grace):
            await proc.wait()
        # The leader may be gone while its children linger (or ignore SIGTERM): end them all.
        _signal_group(proc.pid, signal.SIGKILL)

    async def __call__(self, input: Any, run: RunContext) -> Any:
        env = dict(os.environ)
        env.update(self.env)
        env["TT_RUN_ID"] = run.run_id
        env["TT_FLOW_ID"] = run.flow_id
        env["TT_IDEMPOTENCY_KEY"] = run.idempotency_key or ""
        stdin = msgspec.json.encode(input)
        deadline = self.timeout if self.timeout is not None else math.inf
        stdout_tail, stderr_tail = _Tail(), _Tail()
        try:
            with trio.move_on_after(deadline) as scope:
                async with trio.open_nursery() as nursery:
                    proc: trio.Process = await nursery.start(
                        functools.partial(
                            trio.run_process,
                            self.argv,
                            stdin=stdin,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            check=False,
                            env=env,
                            cwd=self.cwd,
                            start_new_session=True,
                            deliver_cancel=self._end_group,
                        )
                    )
                    assert proc.stdout is not None
                    assert proc.stderr is not None
                    async with trio.open_nursery() as streams:
                        streams.start_soon(stdout_tail.drain, proc.stdout)
                        streams.start_soon(stderr_tail.drain, proc.stderr)
                        await proc.wait()
                        # What the command wrote is in the pipes now. Something it left behind
                        # may hold them open (``daemon &``): it must not hold the run too.
                        streams.cancel_scope.deadline = trio.current_time() + DRAIN_GRACE
        finally:
            # Whatever ended the command (its exit, a cancel, a supersede, the timeout, a lost
            # lease), what it printed so far goes with the run's outcome.
            run.record_output(_output(stdout_tail, stderr_tail))
        if scope.cancelled_caught:
            raise CommandFailed(
                f"command {self.argv[0]} timed out after {self.timeout} s", timed_out=True
            )
        stderr = _tail(bytes(stderr_tail.data), STDERR_TAIL)
        code = proc.returncode
        assert code is not None  # run_process returned, so the command has exited
        if code != 0:
            if code < 0:
                try:
                    what = f"was killed by {signal.Signals(-code).name}"
                except ValueError:
                    what = f"was killed by signal {-code}"
            else:
                what = f"exited with status {code}"
            detail = f": {stderr}" if stderr else ""
            raise CommandFailed(f"command {self.argv[0]} {what}{detail}", returncode=code)
        out = bytes(stdout_tail.data).strip()
        if not out:
            return None
        if stdout_tail.complete:
            try:
                return msgspec.json.decode(out)
            except msgspec.DecodeError:
                pass
        return _tail(out, STDOUT_TAIL)
