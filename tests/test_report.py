"""The HTML and Markdown reports: content a reviewer needs, escaping, self-containment, size."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from latency_data import RUN, SESSION, make_test, sample_tests

from pytest_latency.report import render_comparison, render_html, render_markdown
from pytest_latency.report._markdown import escape
from pytest_latency.report._view import DETAIL_LIMIT, build_view
from pytest_latency.results import build_result, compare_results

INJECTED = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return build_result(sample_tests(), session=SESSION, run=RUN)


@pytest.fixture(scope="module")
def page(result: dict[str, Any]) -> str:
    return render_html(result)


def test_verdict_comes_first_and_says_which_budget_failed_by_how_much(
    result: dict[str, Any], page: str
) -> None:
    budget = result["tests"][0]["budgets"][0]
    over = round(budget["excess"] * 100)
    headline = f"ttft.p95 = {budget['estimate_text']} vs 400 ms budget: +{over}%"
    assert headline in page
    verdict = page.index("1 of 5 latency budgets failed")
    assert verdict < page.index(headline) < page.index("<h2>Budgets</h2>")
    assert page.index("<h2>Budgets</h2>") < page.index("<h2>Tests</h2>")


def test_each_detailed_test_says_prefill_or_decode_and_cache(page: str) -> None:
    assert "Decode-bound." in page or "Prefill-bound." in page
    assert "of input tokens were read from the prompt cache" in page
    assert "cache read ratio is absent, not 0" in page  # the OpenAI test without cache fields
    assert "calls per sample (median) overlap" in page  # fan-out
    assert "run one after another" in page  # the serial chain
    assert "http_429 ×2" in page
    for chart in ("Latency by percentile", "Inter-chunk gaps", "TTFT vs uncached", "per sample"):
        assert chart in page


def test_user_strings_are_escaped_everywhere(page: str) -> None:
    assert INJECTED not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # The only scripts are the report's own two inline ones.
    assert len(re.findall(r"<script\b", page)) == 2


def test_the_page_is_self_contained(page: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page
    assert "@import" not in page and "url(" not in page
    assert not re.search(r"https?://", page)


def test_charts_are_capped_and_the_table_lists_every_test() -> None:
    tests = [make_test(f"t.py::test_{i}", seed=i, samples=2) for i in range(DETAIL_LIMIT + 5)]
    tests.append(make_test("t.py::test_failing", seed=99, samples=4, budgets=("ttft.p50 < 1ms",)))
    view = build_view(build_result(tests, session=SESSION, run=RUN))
    assert len(view.tests) == DETAIL_LIMIT + 6
    assert len(view.details) == DETAIL_LIMIT and view.details_omitted == 6
    failing = next(d for d in view.details if d.nodeid == "t.py::test_failing")
    assert failing.open and failing.verdict == "fail"  # failing tests always get their charts


def test_thousand_test_report_is_small_and_fast() -> None:
    tests = [
        make_test(
            f"tests/test_many.py::test_case[{i}]",
            seed=i,
            samples=3,
            budgets=("ttft.p95 < 800ms",) if i % 10 == 0 else (),
        )
        for i in range(1000)
    ]
    result = build_result(tests, session=SESSION, run=RUN)
    start = time.perf_counter()
    page = render_html(result)
    elapsed = time.perf_counter() - start
    assert len(page.encode()) <= 2_000_000, len(page.encode())
    assert elapsed < 5, elapsed
    assert page.count('<tr class="') >= 1000


def test_markdown_summary(result: dict[str, Any]) -> None:
    text = render_markdown(result)
    first = text.splitlines()[0]
    assert "1 of 5 latency budgets failed" in first
    assert "### Failing budgets" in text
    assert "| tests/chat/test\\_answer.py::test\\_short\\_answer | ttft.p95 &lt; 400ms |" in text
    assert INJECTED not in text
    row = next(line for line in text.splitlines() if "test\\_inject" in line)
    # A `|` in the id must not split the table row: 8 columns means 9 unescaped pipes.
    assert len(re.findall(r"(?<!\\)\|", row)) == 9


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("a|b", "a\\|b"),
        ("<b>x</b>", "&lt;b&gt;x&lt;/b&gt;"),
        ("test_[*x*]", "test\\_\\[\\*x\\*\\]"),
        ("`code`", "\\`code\\`"),
        ("two\nlines", "two lines"),
        ("a & b", "a &amp; b"),
    ],
)
def test_markdown_escape(raw: str, escaped: str) -> None:
    assert escape(raw) == escaped


def test_comparison_markdown_lists_regressions() -> None:
    base = build_result([make_test("t.py::test_a", seed=1, samples=40)], session=SESSION, run=RUN)
    head = build_result(
        [make_test("t.py::test_a", seed=2, samples=40, ttft_ms=900)], session=SESSION, run=RUN
    )
    text = render_comparison(compare_results(base, head), base="base.json", head="head.json")
    assert text.startswith("🔴 **pytest-latency:")
    assert "🔴 regression" in text and "| t.py::test\\_a | ttft |" in text
    same = render_comparison(compare_results(base, base), base="b", head="b")
    assert same.startswith("✅") and "regression |" not in same
