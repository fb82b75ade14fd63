"""The HTML and Markdown reports: content a reviewer needs, escaping, self-containment, size."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from latency_data import (
    GOODPUT_BUDGET,
    build,
    diagnosis_tests,
    make_test,
    sample_tests,
    sweep_tests,
)

from pytest_latency import units
from pytest_latency.report import render_comparison, render_html, render_markdown
from pytest_latency.report._markdown import escape
from pytest_latency.report._view import DETAIL_LIMIT, build_view
from pytest_latency.results import compare_results

INJECTED = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return build(sample_tests())


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
    assert "Mostly streaming." in page or "Mostly before the first token." in page
    assert "of input tokens were read from the prompt cache" in page
    assert "cache read ratio is absent, not 0" in page  # the OpenAI test without cache fields
    assert "calls per sample (median) overlap" in page  # fan-out
    assert "run one after another" in page  # the serial chain
    assert "2 of 14 calls failed (1 kind); 0 SDK retries." in page
    assert '<code>http_429</code></td><td class="num">2</td>' in page
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
    view = build_view(build(tests))
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
    result = build(tests)
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
    # A `|` in the id must not split the table row: 9 columns means 10 unescaped pipes.
    assert len(re.findall(r"(?<!\\)\|", row)) == 10


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("a|b", "a\\|b"),
        ("<b>x</b>", "&lt;b&gt;x&lt;/b&gt;"),
        ("test_[*x*]", "test\\_\\[\\*x\\*\\]"),
        ("`code`", "\\`code\\`"),
        ("two\nlines", "two lines"),
        ("a & b", "a &amp; b"),
        # GitHub mentions, references and autolinks are defused with a zero-width space.
        ("@octocat and @github/security", "@\u200boctocat and @\u200bgithub/security"),
        ("test[#12]", "test\\[\\#\u200b12\\]"),
        ("https://x.io www.y.org", "https:\u200b//x.io www.\u200by.org"),
        ("&#64;octocat", "&amp;\\#\u200b64;octocat"),  # an entity stays text
    ],
)
def test_markdown_escape(raw: str, escaped: str) -> None:
    assert escape(raw) == escaped


def test_comparison_markdown_lists_regressions() -> None:
    base = build([make_test("t.py::test_a", seed=1, samples=40)])
    head = build([make_test("t.py::test_a", seed=2, samples=40, ttft_ms=900)])
    text = render_comparison(compare_results(base, head), base="base.json", head="head.json")
    assert text.startswith("🔴 **pytest-latency:")
    assert "🔴 regression" in text and "| t.py::test\\_a | ttft |" in text
    same = render_comparison(compare_results(base, base), base="b", head="b")
    assert same.startswith("✅") and "regression |" not in same


# --- diagnosis, what-ifs and errors ----------------------------------------------------------


@pytest.fixture(scope="module")
def diag_result() -> dict[str, Any]:
    return build(sample_tests() + diagnosis_tests())


@pytest.fixture(scope="module")
def diag_page(diag_result: dict[str, Any]) -> str:
    return render_html(diag_result)


def _section(page: str, start: str, end: str) -> str:
    return page[page.index(start) : page.index(end, page.index(start))]


def _detail_of(page: str, nodeid: str) -> str:
    start = page.index(f'<span class="id">{nodeid}</span></summary>')
    return page[start : page.index("</details>", start)]


def test_the_diagnosis_comes_after_the_verdict_with_titles_messages_and_evidence(
    diag_page: str,
) -> None:
    verdict = diag_page.index('id="verdict"')
    diagnosis = diag_page.index('<h2 id="diagnosis">Diagnosis</h2>')
    assert (
        verdict
        < diagnosis
        < diag_page.index('<h2 id="errors">')
        < diag_page.index("<h2>Budgets</h2>")
    )
    top = _section(diag_page, '<h2 id="diagnosis">', "<h2>Budgets</h2>")
    for title in (
        "Prefill-bound",
        "Serial calls that could run in parallel",
        "Consumer-bound calls",
        "Too few samples",
        "Cache fields absent",
    ):
        assert f'{title} <span class="count">' in top, title
    # The message (without its repeated lead-in) and the numbers it rests on, in their units.
    assert "% of e2e is before the first token (median of 12 streamed calls" in top
    assert "<i>before 1st token</i> 6" in top and "<i>fit prefill cost</i> 80 ms per 1k" in top
    assert "<i>median saving per sample</i> 1." in top and " s</span>" in top
    assert "<i>n</i> 12" in top
    # Rollup findings name their scope.
    assert "model=gpt-4.1" in top and "session" in top


def test_a_prefill_bound_test_shows_its_finding_and_what_ifs(diag_page: str) -> None:
    detail = _detail_of(diag_page, "tests/diag/test_long_prompt.py::test_summarise")
    assert '<div class="ftitle">Prefill-bound' in detail
    assert "shorten or cache the prompt" in detail
    assert "Fan-out: the slowest of K parallel calls" in detail
    assert "e2e (n=12) p99" in detail and "ttft (n=12) p50" in detail
    ks = re.findall(r'<tr><td class="num">(\d+)</td>', _section(detail, "Fan-out", "</table>"))
    assert ks == ["1", "5", "10", "20", "50", "100"]
    assert "too few values for this p99" in detail  # 12 values cannot support a p99 tail
    hedge = _section(detail, "Hedging", "</table>")
    assert "e2e: duplicate at p90" in hedge and "e2e: duplicate at p95" in hedge
    assert "+10%" in hedge and "+5%" in hedge and " → " in hedge


def test_a_serial_test_shows_the_pairs_and_the_saving(diag_page: str) -> None:
    detail = _detail_of(diag_page, "tests/diag/test_agent.py::test_three_tools")
    assert "Serial calls that could run in parallel" in detail
    assert "0→1 (" in detail and "overlap)" in detail
    assert "Calls per sample (agent steps): median 3" in detail


def test_what_ifs_say_when_there_are_too_few_calls() -> None:
    result = build([make_test("t.py::test_few", samples=3)])
    detail = build_view(result).details[0]
    assert detail.what_ifs is not None and not detail.what_ifs.fan_out
    assert "e2e: 3 successful calls, too few for what-ifs (needs 5)." in detail.what_ifs.notes
    assert "3 calls, too few to say (needs 5)" in render_html(result)


def test_errors_by_kind_with_attempts_in_the_run_summary_and_per_test(diag_page: str) -> None:
    errors = _section(diag_page, '<h2 id="errors">', "<h2>Budgets</h2>")
    assert "7 of 131 calls failed (5 kinds); 3 SDK retries." in errors
    for kind in (
        "http_429",
        "http_529",
        "sse_error:overloaded_error",
        "RemoteProtocolError",
        "ReadTimeout",
    ):
        assert f"<code>{kind}</code>" in errors, kind
    assert "1 failed, 3 retried" in errors and "2 failed" in errors
    assert "consumer-bound (the test read the stream slower than it arrived)" in errors
    detail = _detail_of(diag_page, "tests/diag/test_faults.py::test_flaky_provider")
    row = re.search(r"<tr><td><code>http_429</code></td>(.*?)</tr>", detail)
    assert row is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
    assert cells == ["1", "4", "3", "1", "rate_limit_error: slow down"]  # failed, attempts, …
    assert "2 call(s) consumer-bound" in detail
    # The tests table counts the flagged calls.
    assert re.search(r"test_flaky_provider</a></td>(<td[^>]*>[^<]*</td>){11}<td>2<", diag_page)


def test_finding_messages_are_escaped(diag_result: dict[str, Any], diag_page: str) -> None:
    assert INJECTED not in diag_page and "<img src=x" not in diag_page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; | *x* differs" in diag_page
    assert "&lt;img src=x onerror=alert(1)&gt;" in diag_page
    assert len(re.findall(r"<script\b", diag_page)) == 2
    text = render_markdown(diag_result)
    assert INJECTED not in text and "<img" not in text
    line = next(x for x in text.splitlines() if "Unstable prompt prefix" in x)
    assert "&lt;script&gt;alert\\(1\\)&lt;/script&gt; \\| \\*x\\* differs" in line


def test_markdown_has_one_line_per_finding_kind_and_errors_by_kind(
    diag_result: dict[str, Any],
) -> None:
    text = render_markdown(diag_result)
    assert text.index("### Failing budgets") < text.index("### Diagnosis") < text.index("### Tests")
    diagnosis = _section(text, "### Diagnosis", "### Errors")
    assert (
        "- **Prefill-bound** — tests/diag/test\\_long\\_prompt.py::test\\_summarise: " in diagnosis
    )
    assert "- **Serial calls that could run in parallel** — tests/diag/test\\_agent.py" in diagnosis
    assert "- **Consumer-bound calls** (session): 2 of 131 calls" in diagnosis
    # One line per kind per test: the prefill test's two findings are two lines, not more.
    assert diagnosis.count("test\\_long\\_prompt.py::test\\_summarise") == 2
    assert all(len(line) < 400 for line in diagnosis.splitlines())
    errors = _section(text, "### Errors", "### Tests")
    assert (
        "| http\\_429 | 3 | 3 | tests/diag/test\\_faults.py::test\\_flaky\\_provider "
        "(1 failed, 3 retried)" in errors
    )
    assert "| sse\\_error:overloaded\\_error | 1 |" in errors
    assert "- 2 calls consumer-bound" in errors
    # A healthy run has neither section.
    quiet = render_markdown(build([make_test("t.py::test_ok", samples=6)]))
    assert "### Errors" not in quiet


def test_a_file_written_before_the_split_carried_its_leaning_still_reads_the_same() -> None:
    """Result files from before 0.1.0.dev0's redesign have no `phase.leaning` and no
    `concurrency`: the report takes the leaning from diagnose's thresholds and the overlap from
    the timelines, as it did then, and says what the new file says."""
    new = build(diagnosis_tests())
    old = build(diagnosis_tests())
    for test in old["tests"]:
        test["phase"].pop("leaning", None)
        test.pop("concurrency", None)
    page_new, page_old = render_html(new), render_html(old)
    for nodeid in ("tests/diag/test_long_prompt.py::test_summarise",
                   "tests/diag/test_agent.py::test_three_tools"):  # fmt: skip
        statements_new = re.findall(r"<b>([^<]+)\.</b>", _detail_of(page_new, nodeid))
        statements_old = re.findall(r"<b>([^<]+)\.</b>", _detail_of(page_old, nodeid))
        assert statements_old == statements_new, nodeid
    long = _detail_of(page_old, "tests/diag/test_long_prompt.py::test_summarise")
    assert "<b>Mostly before the first token.</b>" in long
    assert "<b>Serial calls.</b>" in _detail_of(
        page_old, "tests/diag/test_agent.py::test_three_tools"
    )


def test_the_diagnosis_lines_past_the_cap_are_counted_not_dropped(
    diag_result: dict[str, Any],
) -> None:
    """Past 40 lines the Markdown says how many more there are (one per finding kind per test),
    counted the same way for the tests it no longer renders."""
    import copy

    from pytest_latency.report._markdown import MAX_FINDING_LINES

    result = copy.deepcopy(diag_result)
    flagged = [t for t in result["tests"] if t.get("findings") and t.get("error_count")]
    assert flagged, "the diagnosis suite has a test with errors and findings"
    template = flagged[0]
    kinds = len({f["kind"] for f in template["findings"]})
    copies = MAX_FINDING_LINES  # each adds `kinds` lines, so the cap is passed well before
    for i in range(copies):
        clone = copy.deepcopy(template)
        clone["nodeid"] = f"tests/test_many.py::test_{i}"
        result["tests"].append(clone)
    diagnosis = _section(render_markdown(result), "### Diagnosis", "### Errors")
    shown = [line for line in diagnosis.splitlines() if line.startswith("- **")]
    assert len(shown) == MAX_FINDING_LINES
    full = render_markdown(diag_result)
    before = [
        line
        for line in _section(full, "### Diagnosis", "### Errors").splitlines()
        if line.startswith("- **")
    ]
    assert len(before) < MAX_FINDING_LINES  # the suite alone is under the cap
    more = re.search(r"- … and (\d+) more \(see the HTML report\)", diagnosis)
    assert more is not None
    assert int(more.group(1)) == len(before) + copies * kinds - MAX_FINDING_LINES


def test_a_sweep_gets_a_table_charts_against_the_load_and_its_knee() -> None:
    result = build(sample_tests() + sweep_tests())
    levels = [t for t in result["tests"] if "sweep" in t.get("load", {})]
    assert [t["load"]["concurrency"] for t in levels] == [1, 4, 16]
    (sweep,) = build_view(result).sweeps
    assert sweep.name == "tests/load/test_users.py::test_chat[concurrency=*]"
    assert [r.level for r in sweep.rows] == ["concurrency=1", "concurrency=4", "concurrency=16"]
    assert [r.knee for r in sweep.rows] == [False, True, False]
    assert sweep.knee.startswith("Knee at concurrency=4: ")
    # Each chart draws each level of each series, and the knee's line at concurrency 4.
    ttft, tpot, goodput = sweep.charts
    assert len(ttft.lines) == 2 and len(ttft.dots) == 6 and len(tpot.dots) == 6
    (knee_line,) = ttft.segments
    assert knee_line.title == "knee: concurrency 4" and knee_line.x1 == knee_line.x2
    assert ttft.x_label == "concurrency (log scale)"
    # Goodput: the share of good calls each level's good(...) judgement estimated, on 0-100 %.
    assert sweep.goodput == (GOODPUT_BUDGET,)
    assert goodput.title == "Goodput against load" and goodput.y_label == "share of calls"
    (line,) = goodput.lines
    assert len(goodput.dots) == 3 and line.label == GOODPUT_BUDGET
    shares = [next(b for b in t["budgets"] if b["metric"] == "good")["estimate"] for t in levels]
    assert shares[0] >= 0.8 and shares[1] >= 0.8 and shares[2] < 0.8, shares  # missed at 16
    assert [d.title.rsplit("= ", 1)[1] for d in goodput.dots] == [
        units.percent(share) for share in shares
    ]
    assert goodput.y_ticks[-1].label == "100%"
    cells = [
        next(b for b in t["budgets"] if b["metric"] == "good")["estimate_text"] for t in levels
    ]
    assert [r.goodput for r in sweep.rows] == [(c,) for c in cells]
    page = render_html(result)
    assert 'id="sweeps"' in page and re.search(r"concurrency=4(</a>)? <b>knee</b>", page)
    assert "Goodput against load" in page
    assert (
        f'<th class="num">{GOODPUT_BUDGET.replace("<", "&lt;").replace(">", "&gt;")}</th>' in page
    )
    markdown = render_markdown(result)
    section = markdown.split("### Sweep ")[1]
    assert escape(sweep.knee) in section
    assert section.index("concurrency=1 |") < section.index("concurrency=16 |")
    header = next(line for line in section.splitlines() if line.startswith("| level"))
    assert escape(GOODPUT_BUDGET) in header
    row16 = next(line for line in section.splitlines() if line.startswith("| concurrency=16 |"))
    assert f"| {escape(cells[2])} |" in row16
    # No sweep, no section.
    assert build_view(build(sample_tests())).sweeps == ()
    assert "### Sweep" not in render_markdown(build(sample_tests()))


def test_the_knee_is_the_last_level_within_the_ratio_of_the_lowest() -> None:
    from pytest_latency.diagnose import knee

    assert knee([100.0, 120.0, 149.0, 400.0]) == 2
    assert knee([100.0, 151.0]) == 0
    assert knee([100.0, 140.0, 149.0]) is None  # past the levels run
    assert knee([None, 500.0]) is None and knee([]) is None
    assert knee([100.0, None, 300.0]) == 1  # a level without a figure does not end it


def _with_flags(test: dict[str, Any], flags: list[dict[str, bool]]) -> dict[str, Any]:
    """`test` with its first calls' final attempts carrying `flags`, one mapping per call."""
    for call, set_flags in zip(test["calls"], flags, strict=False):
        call["attempts"][-1].update(set_flags)
    return test


def test_flagged_calls_are_counted_once_and_incomplete_calls_are_not_flagged() -> None:
    """`flagged_count` is the calls a distorting flag marks, each once however many it carries;
    a call only `incomplete` (a hedge's loser the caller stopped reading) is listed, not
    flagged. The HTML tests table, the per-test statement, the run's flag table and the Markdown
    all read that one count (issue #14: the examples' report showed hedge losers as flagged)."""
    both = {"consumer_bound": True, "cpu_starved": True}
    hedged = _with_flags(
        make_test("t.py::test_hedged", samples=6),
        [both, {"incomplete": True}, {"incomplete": True}, {"incomplete": True}],
    )
    plain = _with_flags(make_test("t.py::test_plain", seed=2, samples=6), [{"incomplete": True}])
    result = build([hedged, plain])
    by_id = {t["nodeid"]: t for t in result["tests"]}
    assert by_id["t.py::test_hedged"]["flagged_count"] == 1  # two flags, one call
    assert by_id["t.py::test_hedged"]["flags"]["incomplete"] == 3
    assert by_id["t.py::test_plain"]["flagged_count"] == 0
    assert result["session"]["flagged_count"] == 1
    view = build_view(result)
    rows = {r.nodeid: r for r in view.tests}
    assert (rows["t.py::test_hedged"].flagged, rows["t.py::test_plain"].flagged) == (1, 0)
    incomplete = next(f for f in view.flags if f.text.startswith("incomplete"))
    assert (incomplete.calls, incomplete.tests, incomplete.distorting) == (4, 2, False)
    assert [f.distorting for f in view.flags] == [True, True, False]  # flagged ones first
    page = render_html(result)
    assert "incomplete (body not read to the end) <span" in page and "(not flagged" in page
    text = render_markdown(result)
    incomplete_line = f"- 4 calls {escape(incomplete.text)} in 2 test(s) (not flagged)"
    assert incomplete_line in text
    assert "in 1 test(s) (flagged)" in text
    # The plain test's one incomplete call alone does not make it worth a diagnosis line.
    assert "test\\_plain" not in text.split("### Diagnosis")[-1].split("### Errors")[0]
