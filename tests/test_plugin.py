"""The plugin end to end, through pytester: markers, sampling, verdicts, fixtures, the summary.

Inner runs load the plugin through its entry point; the outer suite runs with `-p no:latency`.
Budgets are exercised with values recorded by hand (exact, no network) and, where the point is
capture, against the built-in simulator.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture
def tester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(
        """
        [pytest]
        console_output_style = classic
        asyncio_default_fixture_loop_scope = function
        """
    )
    return pytester


def test_marker_and_options_are_documented(tester: pytest.Pytester) -> None:
    result = tester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        ["@pytest.mark.latency(*expectations, samples=1, warmup=0, max_samples=None)*"]
    )
    result = tester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--latency-capture=*", "*--latency-sim*"])


def test_a_met_budget_passes_and_a_missed_one_fails_with_estimate_and_n(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(
        test_marker_budgets="""
        import pytest

        @pytest.mark.latency("ttft.p50 < 400ms")
        def test_fast(latency):
            for ms in (100, 120, 140):
                latency.record("ttft", ms, unit="ms")

        @pytest.mark.latency("ttft.p50 < 400ms")
        def test_slow(latency):
            for ms in (500, 612, 700):
                latency.record("ttft", ms, unit="ms")
        """
    )
    result = tester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*latency budget missed*", "*ttft.p50 = 612 ms > 400 ms*n=3*"])
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


def test_samples_and_warmup_run_the_body_and_warmup_is_not_judged(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(
        test_samples="""
        import pytest

        RUNS = []

        @pytest.mark.latency("e2e.max < 50ms", samples=4, warmup=2)
        def test_sampled(latency):
            RUNS.append(1)
            # the two warmup runs are slow, the four kept ones fast
            latency.record("e2e", 900 if len(RUNS) <= 2 else 10, unit="ms")

        def test_count():
            assert len(RUNS) == 6
        """
    )
    result = tester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=2)


def test_a_bad_marker_is_a_collection_error_naming_test_and_part(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.latency("ttfx.p95 < 400ms")
        def test_typo():
            pass
        """
    )
    result = tester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    # names the test, the bad part, and a fix
    result.stdout.fnmatch_lines(["*test_bad.py::test_typo*'ttfx'*did you mean*ttft*"])


@pytest.mark.parametrize(
    "marker",
    ['"ttft.p95 < 400ms", samples=0', '"ttft.p95 < 400ms", sample=3', '"ttft.p95 < 400"'],
)
def test_bad_marker_arguments_are_collection_errors(tester: pytest.Pytester, marker: str) -> None:
    tester.makepyfile(
        test_bad=f"""
        import pytest

        @pytest.mark.latency({marker})
        def test_it():
            pass
        """
    )
    result = tester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*test_bad.py::test_it*"])
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


def test_a_budgeted_test_without_calls_fails_with_a_hint(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        test_empty="""
        import pytest

        @pytest.mark.latency("ttft.p95 < 400ms")
        def test_nothing():
            pass
        """
    )
    result = tester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*made no captured LLM call*", "*instrument*"])


def test_async_strict_class_and_parametrized_tests_are_sampled(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        test_shapes="""
        import asyncio
        import pytest

        COUNTS = {}

        def bump(key):
            COUNTS[key] = COUNTS.get(key, 0) + 1

        @pytest.mark.asyncio
        @pytest.mark.latency("e2e.p50 < 1s", samples=3)
        async def test_async(latency):
            bump("async")
            await asyncio.sleep(0)
            latency.record("e2e", 1, unit="ms")

        class TestGroup:
            @pytest.mark.latency("e2e.p50 < 1s", samples=2, warmup=1)
            def test_method(self, latency):
                bump("method")
                latency.record("e2e", 1, unit="ms")

        @pytest.mark.parametrize("x", [1, 2])
        @pytest.mark.latency("e2e.p50 < 1s", samples=2)
        def test_param(latency, x):
            bump(f"param{x}")
            latency.record("e2e", x, unit="ms")

        def test_zz_counts():
            assert COUNTS == {"async": 3, "method": 3, "param1": 2, "param2": 2}
        """
    )
    result = tester.runpytest("-p", "asyncio", "--asyncio-mode=strict")
    result.assert_outcomes(passed=5)


def test_summary_table_lists_budgeted_tests(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        test_summary="""
        import pytest

        @pytest.mark.latency("ttft.max < 1s", samples=2)
        def test_one(latency):
            latency.record("ttft", 0.2)

        @pytest.mark.latency("ttft.p95 < 1s", samples=2)
        def test_two(latency):
            latency.record("ttft", 0.2)
        """
    )
    result = tester.runpytest()
    result.assert_outcomes(passed=2)
    # two values cannot bound a p95: inconclusive, decided by the estimate under the default policy
    result.stdout.fnmatch_lines(
        [
            "*latency summary*",
            "*test*n*calls*ttft p95*verdict*",
            "*test_one*2*pass*",
            "*test_two*2*inconclusive*",
        ]
    )
