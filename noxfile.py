"""Developer sessions: tests, lint, typecheck, docs, bench, simulate."""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests", "lint", "typecheck", "docs"]


def _install(session: nox.Session, *args: str) -> None:
    """Upgrade the session's pip, then install: a new venv's pip may predate ``--group``
    (pip 25.1); every session goes through here, so each starts with a current pip."""
    session.install("--upgrade", "pip")
    session.install(*args)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (PostgreSQL tests run when TT_POSTGRES_DSN reaches a server)."""
    _install(session, "--group", "test", "-e", ".[postgres,otel]")
    session.run("pytest", *session.posargs)


@nox.session
def tests_postgres(session: nox.Session) -> None:
    """Only the PostgreSQL tests; they fail instead of skipping when no server is reachable."""
    _install(session, "--group", "test", "-e", ".[postgres,otel]")
    session.run("pytest", "-m", "postgres", *session.posargs, env={"TT_REQUIRE_POSTGRES": "1"})


@nox.session
def lint(session: nox.Session) -> None:
    _install(session, "--group", "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports", "--no-cache")


@nox.session
def soak(session: nox.Session) -> None:
    """The real-time experiments in full: the SIGKILL soak under every overlap policy (CI runs
    ``supersede``), every case of the shared-schedulers matrix (CI runs five) and the fault
    experiments of docs/faults.md."""
    _install(session, "--group", "test", "-e", ".[postgres,otel]")
    session.run(
        "pytest",
        "tests/postgres/test_multiprocess.py",
        "tests/postgres/test_shared_schedulers.py",
        "tests/faults",
        *session.posargs,
        env={"TT_RUN_SLOW": "all"},
    )


@nox.session
def typecheck(session: nox.Session) -> None:
    _install(session, "--group", "typecheck", "-e", ".[postgres,otel]")
    session.run("mypy")


@nox.session(venv_backend="none")
def verifytypes(session: nox.Session) -> None:
    """pyright --verifytypes at 100% (builds its own throwaway virtualenv)."""
    session.run(".ci/verifytypes", external=True)


@nox.session
def changelog(session: nox.Session) -> None:
    """Build the changelog from changes/: nox -s changelog -- --version X.Y.Z (or --draft)."""
    _install(session, "--group", "release")
    session.run("towncrier", "build", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    _install(session, "--group", "docs", "-e", ".")
    session.run("sphinx-build", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks; each prints its ratio against a peer measured in the same run."""
    _install(session, "-e", ".[postgres]")
    scripts = session.posargs or ["bench/cron_bench.py", "bench/store_bench.py"]
    for script in scripts:
        session.run("python", script)


@nox.session
def simulate(session: nox.Session) -> None:
    """Long deterministic simulations: nox -s simulate -- --seeds N --days D."""
    _install(session, "-e", ".")
    session.run("python", "-m", "trio_triggers.testing", *session.posargs)


@nox.session
def simulate_long(session: nox.Session) -> None:
    """The long seed sets of docs/simulation.md: 2 000 memory and 200 SQLite worlds of 30
    simulated days, on every core (hours on two cores; the summary lines come at the end)."""
    session.install("-e", ".")
    jobs = str(os.cpu_count() or 1)
    common = ("python", "-m", "trio_triggers.testing", "--days", "30", "--jobs", jobs)
    session.run(*common, "--seeds", "2000", *session.posargs)
    session.run(*common, "--seeds", "200", "--store", "sqlite", *session.posargs)


@nox.session
def simulate_planted(session: nox.Session) -> None:
    """Each planted bug's catch rate over 20 seeds of its world, with and without the bug."""
    session.install("-e", ".")
    session.run("python", "-m", "trio_triggers.testing", "--planted", *session.posargs)
