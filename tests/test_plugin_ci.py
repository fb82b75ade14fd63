"""The gate's CI surface end to end: baselines and regressions, the GitHub step summary, and
malformed markers (fuzzed) that must always be collection errors naming the test."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import anthropic  # noqa: F401  (kept loaded across pytester's in-process runs: see test_plugin_sim)
import openai  # noqa: F401
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest_latency.sim  # noqa: F401
from pytest_latency.budgets import BudgetError, parse_expectation
from pytest_latency.results import p_text

pytest_plugins = ["pytester"]

PACED = """
import os
import pytest

@pytest.fixture
def paced(llm_sim):
    decode = float(os.environ["DECODE_MS"])
    ttfb = float(os.environ.get("TTFB_MS", "1"))
    llm_sim.set_model(llm_sim.model.replace(
        ttfb_ms=ttfb, decode_ms_per_token=decode, output_tokens=6, jitter=0.05, seed=3))
    return llm_sim
"""

SUITE = (
    PACED
    + """
@pytest.mark.latency("e2e.max < 10s", samples=30)
def test_answer(openai_client, paced):
    for _ in openai_client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}], stream=True):
        pass
"""
)


@pytest.fixture
def tester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner_suite=SUITE)
    return pytester


def test_a_slower_head_is_a_regression_against_the_saved_baseline(
    tester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A loaded machine adds its scheduling noise to every figure, a few ms and now and then more:
    # 1 ms headers and a 5 ms token made a ttft of 8 ms that a busy run moved to 15 (p50 7.7 ->
    # 10.4, the whole distribution, session 25), past any tolerance that still tells 3x apart. 20 ms
    # headers make the ttft ~21 ms and the e2e ~26, against which that noise is a third; the slower
    # run is 6x both. At 3x, beside two busy loops in a CI run (session 27), the base run's ttft
    # p50 came out 36.6 ms and e2e p95 57 (the machine's +15 to +30 ms) against the slower's 71
    # and 91: +95 % and +59 %, under the 100 % tolerance, and only itl was called slower.
    monkeypatch.setenv("TTFB_MS", "20")
    monkeypatch.setenv("DECODE_MS", "1")
    saved = tester.runpytest("--latency-sim=instant", "--latency-save=base.json")
    saved.assert_outcomes(passed=1)
    assert saved.ret == pytest.ExitCode.OK

    # The same model again: no regression. The tolerance allows for the machine itself slowing
    # down between the two runs (another job on a shared 2-core box), which is not a regression
    # of the code under test. The slowdown looked for is 6x.
    same = tester.runpytest(
        "--latency-sim=instant", "--latency-baseline=base.json", "--latency-tolerance=100%"
    )
    same.assert_outcomes(passed=1)
    assert same.ret == pytest.ExitCode.OK
    same.stdout.no_fnmatch_line("*regressions against the baseline*")

    monkeypatch.setenv("TTFB_MS", "120")  # every stream six times slower
    monkeypatch.setenv("DECODE_MS", "6")
    slower = tester.runpytest(
        "--latency-sim=instant", "--latency-baseline=base.json", "--latency-tolerance=100%"
    )
    slower.assert_outcomes(passed=1)  # the test itself still meets its own budget...
    assert slower.ret == pytest.ExitCode.TESTS_FAILED  # ...but the run fails on the regression
    slower.stdout.fnmatch_lines(
        [
            "*latency regressions against the baseline*",
            "*test_inner_suite.py::test_answer: e2e slower by +*% (p50 * → *, p95 * → *; "
            "n 30 → 30; p = *, Holm-adjusted *)",
        ]
    )


BUDGETED = (
    PACED
    + """
@pytest.mark.latency("e2e.max < 10s", samples=20)
def test_within(openai_client, paced):
    for _ in openai_client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}], stream=True):
        pass

@pytest.mark.latency("ttft.max < 1us", samples=20)
def test_over(openai_client, paced):
    for _ in openai_client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}], stream=True):
        pass
"""
)


def test_a_regressed_row_says_regressed_unless_a_budget_failed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/ci.md, "Where a regression shows": a test that met its budgets but regressed reads
    # `regressed`, one that also missed a budget reads `fail`. No call meets test_over's budget,
    # in either run; decode 4 → 12 ms a token regresses both tests' itl (and e2e, turn).
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner_suite=BUDGETED)
    monkeypatch.setenv("DECODE_MS", "4")
    saved = pytester.runpytest("--latency-sim=instant", "--latency-save=base.json")
    saved.assert_outcomes(passed=1, failed=1)
    monkeypatch.setenv("DECODE_MS", "12")
    summary = pytester.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run = pytester.runpytest(
        "--latency-sim=instant", "--latency-baseline=base.json", "--latency-tolerance=30%"
    )
    run.assert_outcomes(passed=1, failed=1)
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    out = run.stdout.str()
    assert re.search(r"^test_inner_suite.py::test_within .* regressed$", out, re.M), out
    assert re.search(r"^test_inner_suite.py::test_over .* fail$", out, re.M), out
    text = summary.read_text()
    assert re.search(
        r"^\| test\\_inner\\_suite\.py::test\\_within \|.*\| regressed \|$", text, re.M
    )
    assert re.search(r"^\| test\\_inner\\_suite\.py::test\\_over \|.*\| fail \|$", text, re.M)
    assert "### Regressions against the baseline" in text
    for test in ("test_within", "test_over"):
        # The step summary's regression row: the test, the metric, the change and the same
        # p-values (raw, Holm-adjusted) as the terminal's line for it.
        line = re.search(
            rf"^test_inner_suite.py::{test}: itl slower by (\+\d+%) \(p50 .*; "
            rf"p (?:= )?{P_VALUE}, Holm-adjusted {P_VALUE}\)$",
            out,
            re.M,
        )
        assert line, out
        change, p, adjusted = line.groups()
        row = re.escape(f"| {_md(f'test_inner_suite.py::{test}')} | itl |")
        cells = re.escape(f" {p} ({adjusted}) | 🔴 regression |")  # after the Δ p95 column
        assert re.search(rf"^{row}.*\| {re.escape(change)} \|(.*\|)?{cells}$", text, re.M), text


# A p-value as `results.p_text` writes it: `3e-08`, or `< 1e-15` past double precision's reach
# (after a label: `p = 3e-08`, `p < 1e-15`).
P_VALUE = r"([0-9.]+(?:e[-+]\d+)?|< 1e-15)"


def _md(text: str) -> str:
    """A test id as the Markdown tables escape it."""
    return text.replace("_", "\\_")


UNBUDGETED = (
    PACED
    + """
@pytest.mark.latency(samples=20)
def test_plain(openai_client, paced):
    for _ in openai_client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}], stream=True):
        pass

def test_no_marker(openai_client, paced):
    for _ in range(12):
        for _ in openai_client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "q"}], stream=True):
            pass
"""
)


def test_a_regression_in_a_test_without_budgets_fails_the_gate_everywhere(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue #16, item 1: tests with data but no budget, their groups and the session are all
    # compared; every output says so. Decode 4 → 12 ms a token: far beyond the 30 % tolerance
    # whatever a busy machine adds to both runs.
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner_suite=UNBUDGETED)
    monkeypatch.setenv("DECODE_MS", "4")
    pytester.runpytest("--latency-sim=instant", "--latency-save=base.json").assert_outcomes(
        passed=2
    )
    monkeypatch.setenv("DECODE_MS", "12")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    run = pytester.runpytest(
        "--latency-sim=instant",
        "--latency-baseline=base.json",
        "--latency-tolerance=30%",
        "--latency-json=head.json",
        "--latency-markdown=head.md",
        "--junitxml=junit.xml",
    )
    run.assert_outcomes(passed=2)
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    out = run.stdout.str()
    for test in ("test_plain", "test_no_marker"):
        # The row, the regression line, and an annotation on the test's own line.
        assert re.search(rf"test_inner_suite.py::{test} .* regressed$", out, re.M), out
        assert re.search(rf"^test_inner_suite.py::{test}: itl slower by \+\d+% ", out, re.M)
        assert re.search(
            rf"^::error file=test_inner_suite.py,line=\d+,title=latency regression::"
            rf"test_inner_suite.py::{test}: itl slower",
            out,
            re.M,
        ), out
    assert re.search(r"^\(session\): slower .*itl \+\d+%", out, re.M), out
    assert re.search(r"^::error title=latency regression::\(session\): slower .*itl", out, re.M)
    assert "regression(s) against the baseline base.json" in out

    result = json.loads((pytester.path / "head.json").read_text())
    block = result["baseline"]
    assert block["path"] == "base.json" and block["correction"] == "holm"
    regressed = {(r["scope"], r["nodeid"], r["metric"]) for r in block["regressions"]}
    assert ("test", "test_inner_suite.py::test_plain", "itl") in regressed
    assert ("test", "test_inner_suite.py::test_no_marker", "itl") in regressed
    assert ("session", "(session)", "itl") in regressed
    for entry in block["regressions"]:
        assert entry["change_p50"] > 0.3 and entry["p_adjusted"] < 0.05
        assert entry["p_adjusted"] >= entry["p_value"]
    tests = {t["nodeid"]: t for t in result["tests"]}
    assert "itl" in tests["test_inner_suite.py::test_plain"]["regressions"]
    # The p-values, as the file holds them, in the terminal's line, the annotation and the
    # Markdown's p column, each written by the one formatter (`p = 3e-08` or `p < 1e-15`).
    itl = {
        e["nodeid"]: e
        for e in block["regressions"]
        if e["scope"] == "test" and e["metric"] == "itl"
    }
    for test in ("test_plain", "test_no_marker"):
        entry = itl[f"test_inner_suite.py::{test}"]
        p = p_text(entry["p_value"], "p")
        adjusted = p_text(entry["p_adjusted"], "Holm-adjusted", "")
        assert entry["message"].endswith(f"; {p}, {adjusted})"), entry["message"]
        assert entry["message"] in out.splitlines(), out
        assert re.search(
            rf"^::error file=test_inner_suite.py,line=\d+,title=latency regression::"
            rf"test_inner_suite.py::{test}: itl slower .*; {re.escape(p)}, "
            rf"{re.escape(adjusted)}\)$",
            out,
            re.M,
        ), out

    markdown = (pytester.path / "head.md").read_text()
    assert markdown.startswith("❌ **pytest-latency: ")
    assert "### Regressions against the baseline" in markdown
    assert re.search(r"^\| test\\_inner\\_suite\.py::test\\_plain \| itl \|", markdown, re.M)
    assert re.search(
        r"^\| test\\_inner\\_suite\.py::test\\_plain \|.*\| regressed \|$", markdown, re.M
    )
    for nodeid, entry in itl.items():
        cells = f"| {p_text(entry['p_value'])} ({p_text(entry['p_adjusted'])}) | 🔴 regression |"
        row = re.escape(f"| {_md(nodeid)} | itl |") + ".*" + re.escape(cells)
        assert re.search(rf"^{row}$", markdown, re.M), markdown

    junit = ET.parse(pytester.path / "junit.xml").getroot()
    cases = {c.get("name"): c for c in junit.iter("testcase")}
    case = cases["test_plain (latency regression)"]
    failure = case.find("failure")
    assert failure is not None and "itl slower by" in (failure.get("message") or "")
    suite = next(junit.iter("testsuite"))
    assert int(suite.get("failures") or 0) >= 3  # two tests and the session's rollups


SESSION_BUDGETS = """
[session]
expect = [
    "e2e.max < 3600s",
    "ttft.p50 < 1us",
]
"""


def test_a_missed_session_budget_is_annotated_on_its_line_and_is_a_junit_failure(
    tester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue #16, item 2.
    monkeypatch.setenv("DECODE_MS", "0")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    tester.makefile(".toml", budgets=SESSION_BUDGETS)
    run = tester.runpytest(
        "--latency-sim=instant", "--latency-budget=budgets.toml", "--junitxml=junit.xml"
    )
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    run.stdout.fnmatch_lines(
        [
            "::error file=budgets.toml,line=4,title=latency session budget::"
            "ttft.p50 = * > 1 us (n=30, *)"
        ]
    )
    run.stdout.no_fnmatch_line("*line=3,title=latency session budget*")
    junit = ET.parse(tester.path / "junit.xml").getroot()
    cases = {c.get("name"): c for c in junit.iter("testcase")}
    missed = cases["session: ttft.p50 < 1us"]
    assert missed.get("classname") == "pytest-latency"
    failure = missed.find("failure")
    assert failure is not None and "ttft.p50" in (failure.get("message") or "")
    met = cases["session: e2e.max < 3600s"]
    assert met.find("failure") is None
    suite = next(junit.iter("testsuite"))
    assert suite.get("failures") == "1" and suite.get("tests") == "3"


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
