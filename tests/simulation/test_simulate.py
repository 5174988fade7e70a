"""simulate(): determinism, both entry points, planted bugs, and the CI seed sets."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec
import pytest
import trio
import trio.testing

from trio_triggers.testing import (
    CATALOGUE,
    CATCH_AT_LEAST,
    CATCH_SEEDS,
    PLANTED_BUGS,
    PLANTED_WORLDS,
    SimConfig,
    SimulationViolation,
    simulate,
    simulate_async,
)
from trio_triggers.testing._sim_worlds import AUDITED, write_fault_world

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(autouse=True)
def quiet_scheduler_logs() -> Iterator[None]:
    # Thousands of injected failures are logged by the scheduler; keep the test output small.
    logger = logging.getLogger("trio_triggers")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def test_same_seed_gives_a_byte_identical_report() -> None:
    first = simulate(7, SimConfig(days=2))
    second = simulate(7, SimConfig(days=2))
    assert first.to_json() == second.to_json()
    assert b"trigger-reservation:" not in first.to_json()  # no raw uuids in the report
    assert first.trace_lines > 100


def test_different_seeds_give_different_worlds() -> None:
    assert simulate(1, days=1).trace_sha256 != simulate(2, days=1).trace_sha256


def test_report_counts_every_invariant() -> None:
    report = simulate(3, days=2)
    assert list(report.checks) == [info.id for info in CATALOGUE]
    for info in CATALOGUE:
        if info.mode in ("step", "final") and info.id.startswith("T"):
            assert report.checks[info.id] > 0, info.id
    assert report.counts["crashes"] >= 1
    assert report.counts["result.launched"] > 10


async def test_async_entry_point_runs_inside_a_test(
    autojump_clock: trio.testing.MockClock,
) -> None:
    report = await simulate_async(5, SimConfig(days=1))
    assert report.seed == 5
    again = await simulate_async(5, SimConfig(days=1))
    assert report.to_json() == again.to_json()
    # The synchronous entry point (its own trio.run, in a worker thread here) agrees.
    sync = await trio.to_thread.run_sync(lambda: simulate(5, days=1))
    assert sync.to_json() == report.to_json()


async def test_async_entry_point_needs_an_autojump_mock_clock() -> None:
    with pytest.raises(RuntimeError, match="MockClock"):
        await simulate_async(1, SimConfig(days=1))


def test_unknown_planted_bug_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown planted bugs"):
        simulate(1, days=1, planted_bugs=("no-such-bug",))


PLANTED = PLANTED_WORLDS


def test_every_planted_bug_has_a_test() -> None:
    assert set(PLANTED) == set(PLANTED_BUGS)


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_planted_bug_is_caught_in_nearly_every_seed(bug: str) -> None:
    config, invariants = PLANTED[bug].config, PLANTED[bug].invariants
    buggy = msgspec.structs.replace(config, planted_bugs=(bug,))
    caught: list[SimulationViolation] = []
    missed: list[int] = []
    for seed in range(CATCH_SEEDS):
        try:
            simulate(seed, buggy)
        except SimulationViolation as exc:
            caught.append(exc)
        else:
            missed.append(seed)
    unexpected = [str(exc) for exc in caught if exc.violation.invariant not in invariants]
    assert not unexpected, unexpected[0]
    assert len(caught) >= CATCH_AT_LEAST, f"{bug} went unnoticed in seeds {missed}"
    first = caught[0]
    assert f"simulate({first.seed}," in str(first)
    # The seed reproduces the very same violation ...
    with pytest.raises(SimulationViolation) as again:
        simulate(first.seed, buggy)
    assert again.value.violation == first.violation
    assert again.value.trace == first.trace
    # ... and the same world without the bug is clean (all 20 seeds are: `--planted`).
    simulate(first.seed, config)


# --------------------------------------------------------------------------- CI seed sets
# 200 seeds x 7 days on the memory store, 50 on SQLite with the inline executor, and 20
# two-day worlds whose runs are run-store rows executed by owners under hold_lease.


@pytest.mark.parametrize("seed", range(200))
def test_memory_world(seed: int) -> None:
    simulate(seed, SimConfig(days=7, store="memory"))


@pytest.mark.parametrize("seed", range(1000, 1050))
def test_sqlite_world(seed: int) -> None:
    simulate(seed, SimConfig(days=7, store="sqlite"))


@pytest.mark.parametrize("seed", range(2000, 2020))
def test_run_store_world(seed: int) -> None:
    simulate(seed, SimConfig(days=2, run_store=True))


# Worlds that also fire now at random (a dozen manual fires a day, each from a process that does
# not serve): 60 seven-day worlds on the memory store, 15 on SQLite, 10 two-day run-store
# worlds. T37 (manual fires never move the cursor) and T38 (one fire per key, on a row of its
# own) are checked after every transaction, with every other invariant.
MANUAL_FIRES = 12.0


@pytest.mark.parametrize("seed", range(3000, 3060))
def test_manual_fire_memory_world(seed: int) -> None:
    simulate(seed, SimConfig(days=7, store="memory", manual_fires_per_day=MANUAL_FIRES))


@pytest.mark.parametrize("seed", range(3500, 3515))
def test_manual_fire_sqlite_world(seed: int) -> None:
    simulate(seed, SimConfig(days=7, store="sqlite", manual_fires_per_day=MANUAL_FIRES))


@pytest.mark.parametrize("seed", range(3800, 3810))
def test_manual_fire_run_store_world(seed: int) -> None:
    simulate(seed, SimConfig(days=2, run_store=True, manual_fires_per_day=MANUAL_FIRES))


# The write-fault world: runs launched through real LocalRunner processes whose run-store
# writes fail before and after their commit (docs/simulation.md, "Write faults"), 20 worlds.


@pytest.mark.parametrize("seed", range(4000, 4020))
def test_write_fault_world(seed: int) -> None:
    simulate(seed, write_fault_world())


def test_write_fault_worlds_fail_writes_both_ways_and_stay_byte_identical() -> None:
    first = simulate(4000, write_fault_world())
    assert first.to_json() == simulate(4000, write_fault_world()).to_json()
    counts = first.counts
    assert counts["local.fault.fail_before"] > 10
    assert counts["local.fault.fail_after"] > 10
    assert counts["local.executions"] > 50
    assert counts["result.completed"] > 50
    for invariant in ("W1", "W2", "W3", "W4"):
        assert first.checks[invariant] > 0, invariant


def test_manual_fire_worlds_fire_now_and_stay_byte_identical() -> None:
    config = SimConfig(days=2, manual_fires_per_day=MANUAL_FIRES)
    first = simulate(3, config)
    assert first.to_json() == simulate(3, config).to_json()  # made-up keys are normalised
    counts = first.counts
    assert counts["manual.fires"] > 10
    assert counts["manual.fire"] > 0
    assert counts["manual.repeated"] > 0


def test_command_line_runs_seeds_and_reports_speed(capsys: pytest.CaptureFixture[str]) -> None:
    from trio_triggers.testing.__main__ import main

    assert main(["--seeds", "2", "--start", "10", "--days", "1", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "seed 10: ok" in out
    assert "seed 11: ok" in out
    assert "2 seeds x 1 days (memory): 0 failed" in out
    assert "simulated trigger-days per wall second" in out
    assert main(["--seed", "10", "--days", "1", "--report"]) == 0
    assert '"seed":10' in capsys.readouterr().out


def test_jobs_give_the_sequential_reports(capsys: pytest.CaptureFixture[str]) -> None:
    from trio_triggers.testing.__main__ import main

    def reports(*extra: str) -> list[str]:
        assert main(["--seeds", "3", "--start", "20", "--days", "1", "--report", *extra]) == 0
        lines = capsys.readouterr().out.splitlines()
        return [line for line in lines if line.startswith("{")]

    sequential = reports()
    assert len(sequential) == 3
    assert reports("--jobs", "2") == sequential


def test_report_is_identical_across_processes_and_hash_seeds() -> None:
    import os
    import subprocess
    import sys

    code = (
        "import logging, sys; logging.getLogger('trio_triggers').setLevel(logging.CRITICAL);"
        "from trio_triggers.testing import simulate;"
        "sys.stdout.buffer.write(simulate(9, days=1).to_json())"
    )
    outputs = []
    for hash_seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, check=True, timeout=120
        )
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] == simulate(9, days=1).to_json()


# Worlds on the listing tick (a store without the attention index, or listing=True): 40
# seven-day worlds on the memory store, 10 on SQLite, and 20 where a lone scheduler's store
# fails often and the process crashes often, the world where a claim past a failed claim
# would lose a boundary. T20 reports every missing boundary of an audited trigger on this
# path as on the indexed one (docs/simulation.md, "CI seed sets").
LISTING_FAILING = SimConfig(
    days=3,
    schedulers=1,
    store_fault_rate=0.2,
    store_hangs=False,
    crashes_per_day=10,
    declarations=AUDITED,
    listing=True,
)


@pytest.mark.parametrize("seed", range(4000, 4020))
def test_listing_memory_world(seed: int) -> None:
    simulate(seed, SimConfig(days=7, store="memory", listing=True))


@pytest.mark.parametrize("seed", range(4500, 4510))
def test_listing_sqlite_world(seed: int) -> None:
    simulate(seed, SimConfig(days=7, store="sqlite", listing=True))


@pytest.mark.parametrize("seed", range(4800, 4820))
def test_listing_world_on_a_failing_store(seed: int) -> None:
    simulate(seed, LISTING_FAILING)


def test_claiming_past_a_failed_claim_is_caught_on_the_listing_tick() -> None:
    # Five days: the launch path's retried writes fail fewer ticks than before, so three days
    # left two seeds without a claim failing in the middle of a backlog.
    buggy = msgspec.structs.replace(
        LISTING_FAILING, days=5, planted_bugs=("claim_past_failed_claim",)
    )
    caught: list[SimulationViolation] = []
    for seed in range(CATCH_SEEDS):
        try:
            simulate(seed, buggy)
        except SimulationViolation as exc:
            caught.append(exc)
    assert {exc.violation.invariant for exc in caught} == {"T20"}
    assert len(caught) >= CATCH_AT_LEAST, f"caught only in seeds {[e.seed for e in caught]}"
