"""The controller side: gather every test's data, judge the session, summarise, annotate.

Owns `LatencyCollector`, a plugin object registered only on the controller (pytest's junitxml
`LogXML` shape). Reports reach it from this process or, forwarded by pytest-xdist, from workers,
in whatever order; each carries its test's data as a plain attribute. After the run loop it
judges the `[session]` budgets over every kept call and fails the run on a miss.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from pytest_latency.aggregate import Judgement, judge_pooled, summarise
from pytest_latency.plugin._state import REPORT_ATTRIBUTE, RunState, Settings


class LatencyCollector:
    def __init__(self, run: RunState, settings: Settings) -> None:
        self._run = run
        self._settings = settings

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, REPORT_ATTRIBUTE, None)
        if data is None or report.when != "call":
            return
        data = {**data, "outcome": report.outcome}
        self._run.tests.append(data)
        self._run.summaries.append(summarise(data, outcome=report.outcome))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        result = yield
        budget_file = self._settings.budget_file
        if budget_file is not None and budget_file.session:
            judgements = judge_pooled(
                budget_file.session, self._run.tests, policy=self._settings.policy
            )
            self._run.session_judgements = judgements
            # By pytest_sessionfinish it is too late to change the exit status; a failed count
            # here makes it TESTS_FAILED like any failing test.
            if not all(j.passed for j in judgements):
                session.testsfailed += 1
        return result

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        from pytest_latency.terminal import summary_lines

        if self._run.summaries:
            terminalreporter.write_sep("=", "latency summary")
            for line in summary_lines(self._run.summaries):
                terminalreporter.write_line(line)
        judgements: list[Judgement] = self._run.session_judgements
        if judgements:
            terminalreporter.write_sep("-", "latency session budgets")
            for j in judgements:
                mark = "PASS" if j.passed else "FAIL"
                terminalreporter.write_line(f"{mark} {j.message}")
            misses = [j for j in judgements if not j.passed]
            if misses:
                terminalreporter.write_line(
                    f"pytest-latency: {len(misses)} session budget(s) missed: "
                    + "; ".join(j.expr for j in misses),
                    red=True,
                    bold=True,
                )
        if os.environ.get("GITHUB_ACTIONS") == "true":
            self._annotate(terminalreporter)

    def _annotate(self, terminalreporter: pytest.TerminalReporter) -> None:
        """GitHub error annotations on the test's file and line for each missed budget."""
        for data in self._run.tests:
            location = data.get("location") or [data["nodeid"].split("::")[0], None]
            for budget in data.get("budgets", []):
                if budget.get("passed", budget["verdict"] == "pass"):
                    continue
                where = f"file={_escape_property(str(location[0]))}"
                if location[1] is not None:
                    where += f",line={int(location[1]) + 1}"
                message = _escape_data(f"{data['nodeid']}: {budget['message']}")
                terminalreporter.write_line(f"::error {where},title=latency budget::{message}")


def _escape_data(text: str) -> str:
    # GitHub workflow-command escaping: data needs %, CR and LF encoded.
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
