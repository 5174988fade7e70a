"""Every skipped test names its reason (issue 18 section 4): ``tests/conftest.py`` fails a test
whose skip has none, such as a skip raised inside an async fixture, which pytest-trio reports as
a bare "Skipped"."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

pytest_plugins = ["pytester"]


def test_a_skip_without_a_reason_fails_and_one_with_a_reason_stays_a_skip(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makeconftest("from tests.conftest import pytest_runtest_makereport  # noqa: F401\n")
    pytester.makepyfile(
        """
        import pytest

        @pytest.fixture
        async def backend():
            pytest.skip("the reason pytest-trio drops")
            yield

        async def test_bare(backend):
            pass

        @pytest.mark.skipif(True, reason="a reason decided at collection")
        async def test_reasoned():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*test_bare was skipped without a reason*",
            "SKIPPED*a reason decided at collection",
        ]
    )
