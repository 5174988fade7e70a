"""A throwaway PostgreSQL cluster for the fault experiments that stop the server.

:class:`ThrowawayCluster` runs ``initdb`` into a fresh temporary directory, starts ``postgres``
on its own free port (``listen_addresses = '127.0.0.1'``, the unix socket in that directory,
``trust`` authentication for a superuser ``tt``) and can restart it the hard way
(``pg_ctl stop -m immediate``, a pause, ``pg_ctl start``). It never touches another cluster.
Run as root, every server command runs as the ``postgres`` user on a directory it owns.

``fsync = off``: an immediate stop kills the server's processes, not the machine, so the page
cache keeps every write and crash recovery replays the WAL as after a real crash; only a power
loss would need the flushes. Commits stay synchronous (the WAL is written before a commit
returns), so nothing a client saw committed is lost by the restart.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["ThrowawayCluster", "find_bin"]


def find_bin() -> Path | None:
    """The directory with ``initdb`` and ``pg_ctl``, or ``None`` when PostgreSQL is absent."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ThrowawayCluster:
    """One private cluster: :meth:`create`, :meth:`start`, :meth:`stop`, :meth:`destroy`."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="tt-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self.dsn = f"postgresql://tt@127.0.0.1:{self.port}/postgres"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.root.chmod(0o755)

    def _run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / argv[0]), *argv[1:]]
        if self._as_postgres:
            command = ["su", "postgres", "-s", "/bin/sh", "-c", shlex.join(command)]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=True, cwd=self.root
        )

    def create(self) -> None:
        self._run(
            "initdb", "-D", str(self.data), "-U", "tt", "--auth=trust", "--no-sync",
            "--no-instructions",
        )  # fmt: skip
        settings = [
            "listen_addresses = '127.0.0.1'",
            f"port = {self.port}",
            f"unix_socket_directories = '{self.root}'",
            "fsync = off",
            "max_connections = 50",
        ]
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n" + "\n".join(settings) + "\n")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "30", "start")

    def stop(self, mode: str = "immediate") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")

    def running(self) -> bool:
        status = [str(self.bin / "pg_ctl"), "-D", str(self.data), "status"]
        if self._as_postgres:
            status = ["su", "postgres", "-s", "/bin/sh", "-c", shlex.join(status)]
        return subprocess.run(status, capture_output=True, timeout=30).returncode == 0

    def destroy(self) -> None:
        """Stop the server if it runs and remove the directory (never raises)."""
        with contextlib.suppress(Exception):
            if self.data.exists() and self.running():
                self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
