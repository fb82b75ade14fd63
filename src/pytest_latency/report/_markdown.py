"""Markdown for pull-request comments: the run summary and the diff of two runs.

Owns the Markdown layout and the escaping of everything that came from the run (node ids carry
arbitrary parametrize ids: `|` would split a table cell, `<script>` would reach the page as HTML
on some renderers, `*`/`_`/`` ` `` would restyle the text), and the short diagnosis and errors
sections (one line per finding kind for failing or flagged tests; failed calls by error kind),
and the load section (tests run concurrently or under a rate). May import `results`, `by_hand`
(the "by hand" cell) and its siblings `_diagnosis` and `_view` (`cache_text` and `load_text`, the
cache cell and load sentence the HTML report shows too); never jinja2.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_latency import units as fmt
from pytest_latency.by_hand import FIGURES, by_hand_of_entry
from pytest_latency.by_hand import HEADER as BY_HAND
from pytest_latency.report import _diagnosis as diag
from pytest_latency.report._view import (
    cache_text,
    goodput_cell,
    level_id,
    load_text,
    sweep_goodput,
    sweep_knee,
    sweeps,
)
from pytest_latency.results import (
    MIN_VALUES,
    SIGNIFICANCE,
    Comparison,
    MetricChange,
    budget_status,
    changes_of,
    cost_of_block,
    p_text,
    session_label,
    test_status,
    verdict_counts,
)
from pytest_latency.spend import HEADER as COST
from pytest_latency.spend import SAVED_HEADER as SAVED
from pytest_latency.spend import cost_cell, price_line, saved_cell, spend_line

MAX_ROWS = 200
MAX_FINDING_LINES = 40
MAX_MESSAGE = 180
_MARKDOWN_SPECIAL = "\\`*_{}[]()#+!|~<>$"
# `run.partial`: the HTML report's banner says the same (templates/report.html.jinja).
PARTIAL_NOTE = (
    "the run was interrupted (Ctrl-C, SIGTERM) or a pytest-xdist worker crashed; tests that had "
    "not finished are missing or incomplete."
)


# GitHub turns `@name`, `#123`, `https://…` and `www.…` into mentions, references and links
# after rendering, so a backslash does not stop them; a zero-width space after the trigger does
# (renovate and dependabot do the same), and the text still reads the same.
_ZWSP = "\u200b"
_GITHUB_TRIGGERS = re.compile(r"(@)|(#)(?=\d)|(?i:\b(https?|ftp|file)(:)(?=//))|(?i:\b(www)(\.))")


def escape(text: str) -> str:
    """Plain text safe in a Markdown table cell: HTML-escaped, then Markdown punctuation
    backslash-escaped, newlines flattened, and GitHub's mentions, issue references and
    autolinks defused (a PR comment must not notify `@octocat` because a test id says so)."""
    out = html.escape(" ".join(str(text).split()), quote=False)
    out = _GITHUB_TRIGGERS.sub(lambda m: m.group(0) + _ZWSP, out)
    return "".join("\\" + ch if ch in _MARKDOWN_SPECIAL else ch for ch in out)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return lines


def _stat(test: Mapping[str, Any], metric: str, key: str) -> str:
    block = test.get("metrics", {}).get(metric)
    return fmt.value(block.get("unit", "us"), block.get(key)) if block else fmt.ABSENT


def _headline(test: Mapping[str, Any]) -> tuple[str, ...]:
    """The cells a test's row leads with: n, ttft p50 and p95, tpot p50, e2e p95."""
    return (
        str(test.get("samples", 0)),
        _stat(test, "ttft", "p50"),
        _stat(test, "ttft", "p95"),
        _stat(test, "tpot", "p50"),
        _stat(test, "e2e", "p95"),
    )


def _test_verdict(test: Mapping[str, Any]) -> str:
    return test_status(test) or "–"


def render_markdown(result: Mapping[str, Any]) -> str:
    """A summary fit for a PR comment: verdict line, failing budgets, one row per test."""
    counts = verdict_counts(result)
    total = sum(counts.values())
    tests = result.get("tests", [])
    regressions = changes_of((result.get("baseline") or {}).get("regressions", []))
    # A regression fails the gate as a missed budget does: both lead the verdict line.
    slower = f"{len(regressions)} latency regression(s) against the baseline"
    if counts["fail"]:
        failed = f"{counts['fail']} of {total} latency budgets failed"
        head = f"❌ **pytest-latency: {failed}{'; ' + slower if regressions else ''}**"
    elif regressions:
        head = f"❌ **pytest-latency: {slower}**"
    elif counts["inconclusive"]:
        head = f"⚠️ **pytest-latency: no budget failed; {counts['inconclusive']} not confident**"
    elif total:
        head = f"✅ **pytest-latency: all {total} latency budgets passed**"
    else:
        head = "**pytest-latency: no latency budgets**"
    calls = result.get("session", {}).get("call_count", 0)
    lines = [head, ""]
    if result.get("run", {}).get("partial"):
        # Above the counts: a green verdict over a run that never finished must not read as one.
        lines += [f"> ⚠️ **Partial run**: {PARTIAL_NOTE}", ""]
    lines += [
        f"{counts['fail']} failed · {counts['pass']} passed · {counts['inconclusive']} "
        f"inconclusive — {len(tests)} tests, {calls} calls",
        "",
    ]
    spent = spend_line(cost_of_block(result.get("session", {}).get("cost")))
    if spent is not None:
        lines += [escape(spent[0].upper() + spent[1:]), ""]
        prices = price_line(result.get("run", {}).get("prices"))
        if prices is not None:
            lines += [escape(prices[0].upper() + prices[1:]), ""]
    failing = [
        (test["nodeid"], b)
        for test in tests
        for b in test.get("budgets", [])
        if budget_status(b) == "fail"
    ]
    failing += [
        (session_label(b), b)
        for b in result.get("session", {}).get("budgets", [])
        if budget_status(b) == "fail"
    ]
    if failing:
        lines += ["### Failing budgets", ""]
        lines += _table(
            ("test", "budget", "estimate", "budget", "over by", "interval", "n"),
            [
                (
                    escape(nodeid),
                    escape(b["expr"]),
                    escape(b.get("estimate_text") or fmt.ABSENT),
                    escape(b.get("threshold_text") or fmt.ABSENT),
                    fmt.change(b.get("excess")),
                    escape(b.get("interval_text") or "exact"),
                    str(b.get("n", 0)),
                )
                for nodeid, b in failing[:MAX_ROWS]
            ],
        )
        lines.append("")
    if regressions:
        tolerance = (result.get("baseline") or {}).get("tolerance")
        lines += [
            "### Regressions against the baseline",
            "",
            f"A regression is {_rule(tolerance)}.",
            "",
        ]
        lines += _table(_CHANGE_HEADERS, [_change_row(c) for c in regressions[:MAX_ROWS]])
        if len(regressions) > MAX_ROWS:
            lines.append(f"\n… and {len(regressions) - MAX_ROWS} more.")
        lines.append("")
    lines += _diagnosis_section(result)
    lines += _errors_section(result)
    lines += _load_section(tests)
    if tests:
        lines += ["### Tests", ""]
        order = {"fail": 0, "regressed": 1, "inconclusive": 2}
        shown = sorted(tests, key=lambda t: order.get(_test_verdict(t), 3))
        figures: tuple[str, ...] = FIGURES
        # A "by hand" column when any test recorded values itself, and a cost column when any
        # call reported usage, as in the terminal.
        by_hand = [by_hand_of_entry(t) for t in shown[:MAX_ROWS]]
        extra = (BY_HAND,) if any(by_hand) else ()
        costs = [cost_of_block(t.get("cost")) for t in shown[:MAX_ROWS]]
        priced = any(c.priced or c.unpriced for c in costs)
        figures += (COST, SAVED) if priced else ()
        lines += _table(
            ("test", "n", *figures, "verdict", *extra),
            [
                (
                    escape(t["nodeid"]),
                    *_headline(t),
                    _stat(t, "turn", "p95"),
                    cache_text(t),
                    *((escape(cost_cell(cost)), escape(saved_cell(cost))) if priced else ()),
                    _test_verdict(t),
                    *((escape(hand) or fmt.ABSENT,) if extra else ()),
                )
                for t, hand, cost in zip(shown[:MAX_ROWS], by_hand, costs, strict=True)
            ],
        )
        if len(tests) > MAX_ROWS:
            lines += ["", f"… and {len(tests) - MAX_ROWS} more tests (see the HTML report)."]
        lines.append("")
    return "\n".join(lines)


def _load_section(tests: Sequence[Mapping[str, Any]]) -> list[str]:
    """The tests run concurrently or under a rate: their load, and the figures from the
    intended start next to the per-call ones (a stall a closed loop hides shows between them)."""
    loaded = [(t, text) for t in tests if (text := load_text(t)) is not None]
    if not loaded:
        return []
    lines = ["### Load", ""]
    lines += _table(
        ("test", "load", "queue p95", "ttft p95", "ttft_intended p95", "e2e_intended p95"),
        [
            (
                escape(t["nodeid"]),
                escape(text),
                _stat(t, "queue", "p95"),
                _stat(t, "ttft", "p95"),
                _stat(t, "ttft_intended", "p95"),
                _stat(t, "e2e_intended", "p95"),
            )
            for t, text in loaded[:MAX_ROWS]
        ],
    )
    if len(loaded) > MAX_ROWS:
        lines.append(f"\n… and {len(loaded) - MAX_ROWS} more.")
    return [*lines, "", *_sweeps_section(tests)]


def _sweeps_section(tests: Sequence[Mapping[str, Any]]) -> list[str]:
    """One table per sweep (`concurrency=[1, 4, 16]`): its levels by increasing load, how the
    figures move with it, and its knee (`report.sweep_knee`)."""
    lines: list[str] = []
    for name, levels in sweeps(tests).items():
        _, knee_sentence = sweep_knee(levels)
        goodput = sweep_goodput(levels)
        lines += [f"### Sweep {escape(name)}", "", escape(knee_sentence), ""]
        lines += _table(
            (
                "level",
                "n",
                "ttft p50",
                "ttft p95",
                "tpot p50",
                "e2e p95",
                "queue p95",
                "ttft_intended p95",
                "in flight",
                *(escape(expr) for expr in goodput),
                "verdict",
            ),
            [
                (
                    escape(level_id(t)),
                    *_headline(t),
                    _stat(t, "queue", "p95"),
                    _stat(t, "ttft_intended", "p95"),
                    str(t["load"].get("in_flight_max") or fmt.ABSENT),
                    *(escape(goodput_cell(t, expr)) for expr in goodput),
                    _test_verdict(t),
                )
                for t in levels[:MAX_ROWS]
            ],
        )
        lines.append("")
    return lines


def _flagged(test: Mapping[str, Any]) -> bool:
    """A test worth a diagnosis line: a budget not passed, a failed outcome, failed calls,
    flagged calls, or a finding other than too-few-samples."""
    if (
        _test_verdict(test) in ("fail", "regressed", "inconclusive")
        or test.get("outcome") == "failed"
    ):
        return True
    if test.get("error_count") or diag.flagged_calls(test):
        return True
    return any(f.get("kind") != "too_few_samples" for f in test.get("findings", []))


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _diagnosis_section(result: Mapping[str, Any]) -> list[str]:
    """One line per finding kind: run-wide (session and rollups) first, then per failing or
    flagged test, failing budgets first; everything escaped."""
    lines: list[str] = []
    kinds: set[str] = set()
    for finding in diag.rollup_findings(result.get("session", {}), result.get("groups", {})):
        if finding.kind in kinds:  # short: the widest scope of each kind (session first)
            continue
        kinds.add(finding.kind)
        lines.append(
            f"- **{escape(finding.title)}** ({escape(finding.scope)}): "
            f"{escape(_short(finding.message))}"
        )
    tests = [t for t in result.get("tests", []) if _flagged(t) and t.get("findings")]
    order = {"fail": 0, "inconclusive": 1}
    tests.sort(key=lambda t: order.get(_test_verdict(t), 2))
    hidden = 0  # lines past MAX_FINDING_LINES: counted from the kinds, never rendered
    for test in tests:
        if len(lines) >= MAX_FINDING_LINES:
            hidden += len(
                {diag.finding_kind(f) for f in test["findings"] if isinstance(f, Mapping)}
            )
            continue
        views = diag.findings_of_test(test, None)
        for kind in dict.fromkeys(v.kind for v in views):
            same = [v for v in views if v.kind == kind]
            more = f" (+{len(same) - 1} more)" if len(same) > 1 else ""
            lines.append(
                f"- **{escape(same[0].title)}** — {escape(test['nodeid'])}: "
                f"{escape(_short(same[0].message))}{more}"
            )
    if not lines:
        return []
    shown = lines[:MAX_FINDING_LINES]
    if len(lines) + hidden > MAX_FINDING_LINES:
        beyond = len(lines) + hidden - MAX_FINDING_LINES
        shown.append(f"- … and {beyond} more (see the HTML report)")
    return ["### Diagnosis", "", *shown, ""]


def _errors_section(result: Mapping[str, Any]) -> list[str]:
    """Failed and retried calls by error kind, with the tests they happened in; flagged calls."""
    session = result.get("session", {})
    tests = result.get("tests", [])
    rows = diag.run_errors(session, tests, [None] * len(tests))
    flags = diag.run_flags(session, tests)
    if not rows and not flags:
        return []
    lines = ["### Errors", ""]
    if rows:
        lines += _table(
            ("error kind", "failed calls", "retried attempts", "tests"),
            [
                (
                    escape(r.kind),
                    str(r.failed),
                    r.retried,
                    "; ".join(f"{escape(n)} ({escape(c)})" for n, _, c in r.tests)
                    + (f"; and {r.more_tests} more" if r.more_tests else ""),
                )
                for r in rows
            ],
        )
        lines.append("")
    for row in flags:
        what = "flagged" if row.distorting else "not flagged"
        lines.append(f"- {row.calls} calls {escape(row.text)} in {row.tests} test(s) ({what})")
    if flags:
        lines.append("")
    return lines


def _change_row(change: MetricChange) -> tuple[str, ...]:
    flag = "🔴 regression" if change.regression else "🟢 faster" if change.improvement else ""
    if change.p_value is None:
        p_value = f"too few values ({change.n_base} → {change.n_head}; {MIN_VALUES} a side)"
    else:
        p_value = p_text(change.p_value)
        if change.p_adjusted is not None:
            p_value += f" ({p_text(change.p_adjusted)})"
    return (
        escape(change.nodeid),
        change.metric,
        fmt.duration(change.base_p50),
        fmt.duration(change.head_p50),
        fmt.change(change.change_p50),
        fmt.duration(change.base_p95),
        fmt.duration(change.head_p95),
        fmt.change(change.change_p95),
        p_value,
        flag,
    )


_CHANGE_HEADERS = (
    "test",
    "metric",
    "base p50",
    "head p50",
    "Δ p50",
    "base p95",
    "head p95",
    "Δ p95",
    "p slower (Holm)",
    "",
)


def _rule(tolerance: float | None) -> str:
    return (
        f"a p50 or p95 slower by more than {fmt.ratio(tolerance)} *and* a one-sided "
        f"Mann-Whitney U test with p < {SIGNIFICANCE:g} after Holm's adjustment over every "
        "comparison of the run"
    )


def render_comparison(comparison: Comparison, *, base: str, head: str) -> str:
    """The diff of two runs for a PR comment: regressions first, then the full table folded."""
    regressions = comparison.regressions
    improvements = [c for c in comparison.changes if c.improvement]
    if regressions:
        title = f"🔴 **pytest-latency: {len(regressions)} latency regression(s)**"
    else:
        title = "✅ **pytest-latency: no latency regression**"
    lines = [
        title,
        "",
        f"{escape(base)} → {escape(head)}: a regression is {_rule(comparison.tolerance)} "
        f"({len(comparison.changes)} metrics compared, {len(improvements)} faster).",
        "",
    ]
    if regressions:
        lines += _table(_CHANGE_HEADERS, [_change_row(c) for c in regressions[:MAX_ROWS]])
        lines.append("")
    if comparison.changes:
        lines += ["<details><summary>All compared metrics</summary>", ""]
        lines += _table(_CHANGE_HEADERS, [_change_row(c) for c in comparison.changes[:MAX_ROWS]])
        if len(comparison.changes) > MAX_ROWS:
            lines.append(f"\n… and {len(comparison.changes) - MAX_ROWS} more.")
        lines += ["", "</details>", ""]
    if comparison.only_base:
        lines.append(f"Only in base: {len(comparison.only_base)} test(s).")
    if comparison.only_head:
        lines.append(f"Only in head: {len(comparison.only_head)} test(s).")
    return "\n".join(lines).rstrip() + "\n"
