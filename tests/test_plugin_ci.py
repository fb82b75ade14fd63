"""The gate's CI surface end to end: baselines and regressions, the GitHub step summary, and
malformed markers (fuzzed) that must always be collection errors naming the test."""

from __future__ import annotations

import anthropic  # noqa: F401  (kept loaded across pytester's in-process runs: see test_plugin_sim)
import openai  # noqa: F401
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest_latency.sim  # noqa: F401
from pytest_latency.budgets import BudgetError, parse_expectation

pytest_plugins = ["pytester"]

SUITE = """
import os
import pytest

@pytest.fixture
def paced(llm_sim):
    decode = float(os.environ["DECODE_MS"])
    llm_sim.set_model(llm_sim.model.replace(
        ttfb_ms=1.0, decode_ms_per_token=decode, output_tokens=6, jitter=0.05, seed=3))
    return llm_sim

@pytest.mark.latency("e2e.max < 10s", samples=30)
def test_answer(openai_client, paced):
    for _ in openai_client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}], stream=True):
        pass
"""


@pytest.fixture
def tester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner_suite=SUITE)
    return pytester


def test_a_slower_head_is_a_regression_against_the_saved_baseline(
    tester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Decode dominates each call (6 × 5 ms), so a loaded machine's scheduling noise (a few ms)
    # stays small against the 3× slowdown the test looks for.
    monkeypatch.setenv("DECODE_MS", "5")
    saved = tester.runpytest("--latency-sim=instant", "--latency-save=base.json")
    saved.assert_outcomes(passed=1)
    assert saved.ret == pytest.ExitCode.OK

    # The same model again: no regression. The tolerance allows for the machine itself slowing
    # down between the two runs (another job on a shared 2-core box), which is not a regression
    # of the code under test.
    same = tester.runpytest(
        "--latency-sim=instant", "--latency-baseline=base.json", "--latency-tolerance=60%"
    )
    same.assert_outcomes(passed=1)
    assert same.ret == pytest.ExitCode.OK
    same.stdout.no_fnmatch_line("*regressions against the baseline*")

    monkeypatch.setenv("DECODE_MS", "15")  # every stream about three times slower
    slower = tester.runpytest(
        "--latency-sim=instant", "--latency-baseline=base.json", "--latency-tolerance=60%"
    )
    slower.assert_outcomes(passed=1)  # the test itself still meets its own budget...
    assert slower.ret == pytest.ExitCode.TESTS_FAILED  # ...but the run fails on the regression
    slower.stdout.fnmatch_lines(
        [
            "*latency regressions against the baseline*",
            "*test_inner_suite.py::test_answer: e2e slower than the baseline by +*%*",
        ]
    )


def test_the_markdown_summary_is_appended_to_the_github_step_summary(
    tester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DECODE_MS", "0")
    summary = tester.path / "step-summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    tester.runpytest("--latency-sim=instant").assert_outcomes(passed=1)
    text = summary.read_text()
    assert text.startswith("# earlier step\n")  # appended, never overwritten
    assert "latency budget" in text and "test\\_answer" in text


# Fragments of the budget grammar, recombined: most combinations are malformed.
FRAGMENTS = st.sampled_from(
    [
        "ttft", "tpot", "itl", "e2e", "ttfx", "calls", "cache_read_ratio", "error_rate", "good",
        ".p95", ".p99.9", ".p101", ".max", ".", "{model=x}", "{", "}", "(", ")", ",", " ",
        "<", "<=", ">", "=", "==", "400", "-1", "1e999", "nan", "ms", "s", "%", "tok", "µs",
        "\u00a0", "ｍｓ", "'", '"', "\\", "\n",
    ]
)  # fmt: skip
MARKER_TEXT = st.lists(FRAGMENTS, min_size=0, max_size=8).map("".join)


@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(texts=st.lists(MARKER_TEXT, min_size=6, max_size=6, unique=True))
def test_fuzzed_markers_are_collection_errors_naming_each_bad_test(
    pytester: pytest.Pytester, texts: list[str]
) -> None:
    bad = []
    lines = ["import pytest", ""]
    for i, text in enumerate(texts):
        try:
            parse_expectation(text, source="probe")
        except BudgetError:
            bad.append(i)
        lines += [f"@pytest.mark.latency({text!r})", f"def test_{i}():", "    pass", ""]
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner_fuzz="\n".join(lines))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    if bad:
        assert result.ret == pytest.ExitCode.INTERRUPTED
        for i in bad:
            result.stdout.fnmatch_lines([f"*test_inner_fuzz.py::test_{i} @pytest.mark.latency*"])
    else:  # every marker was valid: the tests run and fail for making no call
        result.assert_outcomes(failed=len(texts))
